"""deepflow.designs.read_design_file: a file given as `design=` that is not a design file is named as such (what is
wrong with it: not text, not YAML, not a mapping, no section, keys that are no section, a section that is no
mapping), and its content never appears in the error, from the CLI or the Python API."""

from __future__ import annotations

import pytest

from deepflow.cli import main
from deepflow.config import compose_config
from deepflow.designs import read_design_file
from deepflow.presets import ConfigError

SECRET = "hunter2-s3cr3t-7f3a"
FILES = {  # name: (content, what the error says)
    "passwd": (f"root:x:0:0:root:/root:/bin/bash\nalice:{SECRET}:1000:1000::/home/alice:/bin/sh\n",
               "is not a design file: it holds one value, not a YAML mapping of the sections hardware, system"),
    "env": (f"API_KEY={SECRET}\n", "is not a design file: it holds one value"),
    "list": (f"- {SECRET}\n- two\n", "is not a design file: it holds a list, not a YAML mapping"),
    "empty": ("", "is not a design file: it holds nothing"),
    "other-mapping": (f"services:\n  db:\n    password: {SECRET}\n{SECRET}: 1\n",
                      "is not a design file: none of its 2 top-level keys is a section: allowed hardware"),
    "extra-keys": (f"mapping:\n  tp: 2\n{SECRET}: x\npassword: {SECRET}\n",
                   "has 2 top-level key(s) that are no section (lines 3, 4): allowed hardware"),
    "bad-yaml-alias": (f"mapping: *{SECRET}\n", "is not a design file: it is not valid YAML (the parser stops at "
                                                 "line 1, column 10)"),
    "duplicate-key": (f"{SECRET}: 1\n{SECRET}: 2\n", "is not a design file: it is not valid YAML"),
    "section-not-mapping": (f"hardware: {SECRET}\n", "section hardware is not a mapping of hardware fields"),
}


@pytest.fixture(params=sorted(FILES))
def bad_file(request, tmp_path):
    content, needle = FILES[request.param]
    path = tmp_path / f"{request.param}.yaml"
    path.write_text(content)
    return path, needle


def test_the_cli_names_the_problem_and_never_echoes_the_file(bad_file, tmp_path, monkeypatch, capsys):
    path, needle = bad_file
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", f"design={path}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"deepflow: error: design='{path}'"), err
    assert needle in err
    assert SECRET not in err and "root:x" not in err and "Traceback" not in err


def test_the_python_api_names_the_problem_and_never_echoes_the_file(bad_file):
    path, needle = bad_file
    with pytest.raises(ConfigError) as info:
        compose_config([f"design={path}"])
    assert needle in str(info.value) and SECRET not in str(info.value)


def test_a_binary_file_is_not_text(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\x7fELF\xff\xfe\x00" + SECRET.encode())
    with pytest.raises(ConfigError, match="is not a design file: it is not text") as info:
        read_design_file(str(path))
    assert SECRET not in str(info.value)


def test_a_design_file_with_sections_and_config_keys_reads(tmp_path):
    path = tmp_path / "design.yaml"
    path.write_text("mapping:\n  tp: 2\nchip: null\nname: mine\n")
    loaded = read_design_file(str(path), other_keys=["name"])
    assert loaded.mapping.tp == 2 and loaded.chip is None and loaded.name == "mine"
