"""Published measurements of accelerator / node power drawn while training DNNs and LLMs.

A data table for checking the energy model (`avg_power_w` of `analytical.search.best_mappings`) against what
real training runs drew. Nothing here is fitted: every number is quoted from, or computed from the raw data of,
the source named in its row. `experiments/benchmarks/bench_energy.py` compares four of these figures today;
this table is the wider set to wire in.

Each entry of `MEASUREMENTS` is a dict with these keys:

- ``id``: short unique name.
- ``kind``: ``"measurement"`` (a power or energy reading taken during training), ``"ratio"`` (a measured
  quantity published only as a fraction or ratio), ``"cap_only"`` (the run's power limit is stated but no
  reading), ``"tdp_only"`` (only the rated TDP and a qualitative observation). Only ``"measurement"`` rows
  carry a reading in watts; the others are context and must not be compared as if they were readings.
- ``source``: paper / page / repository, with the table, figure, section or file path.
- ``quote``: the exact sentence or table cell (for raw MLPerf logs: the log line format that carries the data).
- ``gpu``: the conf/hardware preset of the accelerator (``h100-sxm-80gb``, ``b200``, ``tpu-v4``, ...); ``None``
  when no preset matches. ``gpu_note`` says where the part differs from the preset.
- ``num_devices``: accelerators in the measured job; ``devices_per_node``; ``num_nodes``.
- ``model``: a conf/model preset name when one matches the architecture, else a short description;
  ``model_note`` gives the differences (LoRA fine-tuning, longer sequence than the preset, ...).
- mapping, as stated by the source or its submitted config (``None`` = not stated): ``tp``, ``pp``, ``cp``,
  ``dp``, ``micro_batch_size``, ``global_batch_size`` (sequences), ``seq_length``, ``precision``.
- ``measured_w_per_device``: accelerator-only average power (W) per device, ``None`` if only node power.
- ``measured_node_w``: average power (W) of one whole node (8 GPUs + CPUs + DRAM + NICs + NVSwitches + fans /
  pumps + power-supply loss, as ``what_is_measured`` says), ``None`` if only device power.
- ``node_statistic``: what ``measured_node_w`` is (``"mean over the run"``, ``"maximum"``, ...).
- ``energy_j`` and ``duration_s``: energy of the run (all nodes, excluding switches unless said) and the run
  time between MLPerf ``run_start`` and ``run_stop``, when the source gives them.
- ``node_overhead_note``: what besides the accelerators is inside the measured power, and what is known about it.
- ``power_limit_w``: a power cap set below TDP during the run, ``None`` if the GPUs ran at their default limit.
- ``what_is_measured``: boundary and method (PDU / power shelf AC or DC, IPMI/BMC, nvidia-smi/NVML, DCGM, ...).
- ``derivation``: how a number was obtained when it is not printed verbatim in the source (e.g. the mean of the
  1 Hz readings of an MLPerf power log between ``run_start`` and ``run_stop``).

MLPerf Training power logs (v4.0 SMC, v4.1 Dell, v5.0 Lenovo) were read from the mlcommons/training_results_v*
repositories: for each run the node power logs ``power/result_N/node_*.txt`` hold one ``power_reading`` (W) per
1-2 s and ``result_N.txt`` the ``run_start`` / ``run_stop`` times; the per-node mean is the mean of the readings
inside that interval, the energy the trapezoid integral of them, both averaged over the submitted runs.
`mlperf_run_power` below recomputes them from a checkout.

Run as a script (`python experiments/benchmarks/power_measurements.py`), it lists the rows, then ONE JSON line:
the number of rows, and of rows of each kind.
"""

from __future__ import annotations

import json
from statistics import mean

# Commits the MLPerf numbers were computed from
MLPERF_V40 = "github.com/mlcommons/training_results_v4.0"
MLPERF_V41 = "github.com/mlcommons/training_results_v4.1 (commit b87b9e396f771345d4ef122ba33456304f15228d)"
MLPERF_V50 = "github.com/mlcommons/training_results_v5.0 (commit 0fdc28f013256aea84fa36fdaf1e0fa46094b18c)"
MLPERF_LOG_QUOTE = (':::MLLOG {"namespace": "", "time_ms": ..., "event_type": "POINT_IN_TIME", "key": '
                    '"power_reading", "value": <W>, ...} (one per node per 1-2 s)')
MLPERF_DERIVATION = ("mean of the node power_reading values whose time_ms lies between run_start and run_stop "
                     "of result_N.txt, averaged over the nodes and over the submitted runs; energy = trapezoid "
                     "integral of the readings over the same interval, summed over nodes, averaged over runs")

_NO_MAPPING = dict(tp=None, pp=None, cp=None, dp=None, micro_batch_size=None, global_batch_size=None,
                   seq_length=None, precision=None)


def _row(**kw) -> dict:
    row = dict(id=None, kind="measurement", source=None, quote=None, gpu=None, gpu_note=None, num_devices=None,
               devices_per_node=None, num_nodes=None, model=None, model_note=None, **_NO_MAPPING,
               measured_w_per_device=None, measured_node_w=None, node_statistic=None, energy_j=None,
               duration_s=None, node_overhead_note=None, power_limit_w=None, what_is_measured=None,
               derivation=None)
    unknown = set(kw) - set(row)
    if unknown:
        raise KeyError(f"unknown keys {sorted(unknown)}")
    row.update(kw)
    return row


SMC_NODE = ("SMC (Sustainable Metal Cloud) H100 HGX node: 8 x H100-SXM5-80GB, 2 x Xeon Platinum 8462Y+, 2 TB "
            "DRAM, NVMe, InfiniBand NDR, 'SMC IMMERSION COOLING TECHNOLOGY' (systems/*SMC-H100-SXM-80GB.json)")
SMC_AC = ("whole node at the AC input of the immersion-rack power shelf (submission smc-ac-power; "
          "SMC/Firmus, firmus.co/research-lab/mlperf: power 'captured as far upstream as possible - at the "
          "level of our immersion-rack power shelves'); MLPerf power logger, one reading per ~2 s")
SMC_OVERHEAD = ("node includes 2 CPUs, DRAM, NICs, NVSwitches, storage and PSU loss; immersion cooling, so no "
                "server fans. The same runs were also logged at the DC side of the power shelves "
                "(submission smc-dc-power): see the row's note")
LORA_NOTE = ("MLPerf llama2_70b_lora: LoRA fine-tuning (lora_rank 16) of Llama 2 70B on GovReport, frozen base "
             "weights (no weight-gradient GEMMs or optimizer step for them), sequence 8192 "
             "(conf/base/model_config.yaml seq_length: 8192) vs the preset's 4096; time-to-train run")

MEASUREMENTS: list[dict] = [
    # ---- Latif et al. 2024 / Newkirk et al. 2025: 8x H100 HGX node at Brookhaven -------------------------
    _row(
        id="latif2024-h100-node-max",
        source=("Latif, Newkirk, Carbone, Munir, Lin, Koomey, Yu, Dong, 'Empirical Measurements of AI Training "
                "Power Demand on a GPU-Accelerated Node', arXiv 2412.08602 (2024); IEEE Access 13:61740-61747 "
                "(2025) as 'Single-Node Power Demand During AI Training: Measurements on an 8-GPU NVIDIA H100 "
                "System'. Abstract."),
        quote=("We empirically measured the instantaneous power draw of an 8-GPU NVIDIA H100 HGX node during the "
               "training of open-source image classifier (ResNet) and large-language models (Llama2-13b). The "
               "maximum observed power draw was approximately 8.4 kW, 18% lower than the manufacturer-rated "
               "10.2 kW, even with GPUs near full utilization."),
        gpu="h100-sxm-80gb", num_devices=8, devices_per_node=8, num_nodes=1,
        model="llama2-13b",
        model_note=("the abstract's maximum is over its ResNet and Llama2-13b runs (a third-party summary, "
                    "sciencestack.ai, says GPU-burn stress tests were also run and gives the peak as 8.48 kW, so "
                    "the maximum may come from the stress test rather than from training); batch/mapping of the "
                    "Llama2-13b run not read (paper body not available here)"),
        measured_node_w=8400.0, node_statistic="maximum (instantaneous), not an average",
        node_overhead_note=("whole node: 8 GPUs + host CPUs + DRAM + NICs + NVSwitches + fans "
                            "(AMD EPYC 9354 CPU and 1.5 TB memory per the paper as summarised by "
                            "themoonlight.io); rated 10.2 kW"),
        what_is_measured=("node power at the rack (data-centre infrastructure management, DCIM, metering via "
                          "SNMP/Modbus per a third-party summary of the method section); not GPU-only"),
    ),
    _row(
        id="newkirk2025-h100-node-typical",
        source=("Newkirk, Fernandez, Koomey, Latif, Strubell, Shehabi, Samaras, 'Empirically-Calibrated H100 Node "
                "Power Models for Reducing Uncertainty in AI Training Energy Estimation', arXiv 2506.14551 "
                "(2025). Abstract."),
        quote=("By combining empirical measurements from Brookhaven National Laboratory during AI training on "
               "8-GPU H100 systems with open-source benchmarking data, we develop statistical models relating "
               "computational intensity to node-level power consumption. [...] Our analysis reveals that even "
               "computationally intensive workloads operate at only 76% of the 10.2 kW TDP rating."),
        gpu="h100-sxm-80gb", num_devices=8, devices_per_node=8, num_nodes=1,
        model="transformer and CNN training mix (Brookhaven Llama2-13b / ResNet runs plus open MLPerf data)",
        measured_node_w=0.76 * 10200.0, node_statistic="typical level of compute-intensive training, per node",
        node_overhead_note="whole node (rated 10.2 kW = DGX/HGX H100 system rating), CPUs, fans, NICs included",
        what_is_measured="node-level power (same Brookhaven metering as Latif et al.) and open benchmark logs",
        derivation="0.76 x 10,200 W, both numbers quoted",
    ),
    # ---- MLPerf Training v4.0: Sustainable Metal Cloud, immersion-cooled H100 (first power submission) ------
    _row(
        id="mlperf40-smc-h100-1node-llama2-70b-lora",
        source=(f"MLPerf Training v4.0, Sustainable Metal Cloud, {MLPERF_V40}: "
                "smc-ac-power/results/1xSMC-H100-SXM-80GB/llama2_70b_lora/ (10 runs) and "
                "benchmarks/llama2-70b_lora/implementations/nemo/configs/config_SMCH100_1x8x4xtp4pp1cp1.sh; "
                "headline figures also on smc.co/mlperfv40/results/llama2-70b-lora"),
        quote=(MLPERF_LOG_QUOTE + "; SMC page: 'Total Energy Consumed (Joules) - AC | 12,127,904 J', "
               "'Ave Energy Per Node (Combined) - DC | 6.741 kW (DC)'"),
        gpu="h100-sxm-80gb", num_devices=8, devices_per_node=8, num_nodes=1,
        model="llama2-70b", model_note=LORA_NOTE,
        tp=4, pp=1, cp=1, dp=2, micro_batch_size=1, global_batch_size=8, seq_length=8192, precision="fp8",
        measured_node_w=7157.0, node_statistic="mean over the run (run means 7,133-7,175 W; max reading 7,358 W)",
        energy_j=1.2074e7, duration_s=1687.9,
        node_overhead_note=SMC_OVERHEAD + "; DC-side mean of the same runs 6,953 W",
        what_is_measured=SMC_AC,
        derivation=MLPERF_DERIVATION + ("; dp = 8 GPUs / (tp 4 x cp 1); MINIBS=4 with global batch 8 -> "
                                        "gradient_accumulation_steps 4 in the log"),
    ),
    _row(
        id="mlperf40-smc-h100-8node-llama2-70b-lora",
        source=(f"MLPerf Training v4.0, Sustainable Metal Cloud, {MLPERF_V40}: "
                "smc-ac-power/results/8xSMC-H100-SXM-80GB/llama2_70b_lora/ (10 runs) and "
                "configs/config_SMCH100_8x8x1xtp4pp1cp2.sh"),
        quote=MLPERF_LOG_QUOTE + "; sw_0.txt: '\"key\": \"interconnect_power_est\", \"value\": 16100'",
        gpu="h100-sxm-80gb", num_devices=64, devices_per_node=8, num_nodes=8,
        model="llama2-70b", model_note=LORA_NOTE,
        tp=4, pp=1, cp=2, dp=8, micro_batch_size=1, global_batch_size=8, seq_length=8192, precision="fp8",
        measured_node_w=5815.0, node_statistic="mean over the run and the 8 nodes (run means 5,798-5,832 W)",
        energy_j=1.4710e7, duration_s=318.2,
        node_overhead_note=(SMC_OVERHEAD + "; DC-side mean 5,708 W; InfiniBand switches not in the node power: "
                            "the submission logs a constant estimate of 16,100 W for them"),
        what_is_measured=SMC_AC,
        derivation=MLPERF_DERIVATION + "; dp = 64 / (tp 4 x cp 2)",
    ),
    _row(
        id="mlperf40-smc-h100-64node-llama2-70b-lora",
        source=(f"MLPerf Training v4.0, Sustainable Metal Cloud, {MLPERF_V40}: "
                "smc-ac-power/results/64xSMC-H100-SXM-80GB/llama2_70b_lora/ (10 runs) and "
                "configs/config_SMCH100_64x8x1xtp4pp1cp2.sh"),
        quote=MLPERF_LOG_QUOTE + "; sw_0.txt: '\"key\": \"interconnect_power_est\", \"value\": 59570'",
        gpu="h100-sxm-80gb", num_devices=512, devices_per_node=8, num_nodes=64,
        model="llama2-70b", model_note=LORA_NOTE,
        tp=4, pp=1, cp=2, dp=64, micro_batch_size=1, global_batch_size=64, seq_length=8192, precision="fp8",
        measured_node_w=5086.0, node_statistic="mean over the run and the 64 nodes (run means 5,061-5,118 W)",
        energy_j=3.7488e7, duration_s=117.2,
        node_overhead_note=(SMC_OVERHEAD + "; DC-side mean 4,985 W; switches logged as a constant 59,570 W "
                            "estimate, not in the node power. Runs are ~2 min, so start-up and evaluation "
                            "phases weigh more than in the 1-node run"),
        what_is_measured=SMC_AC,
        derivation=MLPERF_DERIVATION + "; dp = 512 / (tp 4 x cp 2)",
    ),
    _row(
        id="mlperf40-smc-h100-64node-gpt3-175b",
        source=(f"MLPerf Training v4.0, Sustainable Metal Cloud, {MLPERF_V40}: "
                "smc-ac-power/results/64xSMC-H100-SXM-80GB/gpt3/ (3 runs; power/*/total_power.txt) and "
                "benchmarks/gpt3/implementations/nemo/config_SMCH100_64x8x128x4x8.sh, config_common.sh, "
                "config_fp8.sh"),
        quote=(MLPERF_LOG_QUOTE + "; total_power.txt: 'Total Power Usage: 415.22 kWh' (run 5848..._2; the "
               "others 415.23 and 415.08 kWh)"),
        gpu="h100-sxm-80gb", num_devices=512, devices_per_node=8, num_nodes=64,
        model="gpt3-175b",
        model_note=("MLPerf gpt3 benchmark: continued pre-training of GPT-3 175B from the step-3000 checkpoint to "
                    "log-perplexity 2.69 (pre-training compute, unlike the LoRA rows)"),
        tp=4, pp=8, cp=1, dp=16, micro_batch_size=2, global_batch_size=2048, seq_length=2048, precision="fp8",
        measured_node_w=6849.0, node_statistic="mean over the run and the 64 nodes (run means 6,848-6,850 W)",
        energy_j=1.4948e9, duration_s=3411.9,
        node_overhead_note=(SMC_OVERHEAD + "; DC-side mean 6,742 W; switches (constant 59,570 W estimate) not "
                            "included; the nodes' energy 1.4948e9 J = 415.2 kWh matches total_power.txt"),
        what_is_measured=SMC_AC,
        derivation=(MLPERF_DERIVATION + "; mapping from the config: TENSOR_MODEL_PARALLEL=4, "
                    "PIPELINE_MODEL_PARALLEL=8, MICRO_BATCH_SIZE=2, MINIBS=128 per DP rank, dp = 512 / 32 = 16, "
                    "global_batch_size 2048 and max_sequence_length 2048 from the log; FP8 (config_fp8.sh)"),
    ),
    # ---- MLPerf Training v4.1: Dell XE9680, air-cooled H100 --------------------------------------------------
    _row(
        id="mlperf41-dell-h100-8node-llama2-70b-lora",
        source=(f"MLPerf Training v4.1, Dell, {MLPERF_V41}: Dell/results/8xXE9680x8H100-SXM-80GB-POWER/"
                "llama2_70b_lora/ (10 runs), Dell/systems/8xXE9680x8H100-SXM-80GB-POWER.json, "
                "Dell/benchmarks/llama2_70b_lora/implementations/nemo/configs/config_DGXH100_8x8x1xtp4pp1cp2.sh"),
        quote=MLPERF_LOG_QUOTE + "; system json: '\"cooling\": \"air,RDHx\"', '\"hw_notes\": \"GPU TDP:700W\"'",
        gpu="h100-sxm-80gb", num_devices=64, devices_per_node=8, num_nodes=8,
        model="llama2-70b", model_note=LORA_NOTE,
        tp=4, pp=1, cp=2, dp=8, micro_batch_size=1, global_batch_size=8, seq_length=8192, precision="fp8",
        measured_node_w=7105.0,
        node_statistic="mean over the run and the 8 nodes (run means 6,740-7,303 W; max reading 10,060 W)",
        energy_j=1.7017e7, duration_s=300.6,
        node_overhead_note=("Dell PowerEdge XE9680: 8 x H100-SXM5-80GB (700 W TDP), 2 x Xeon Platinum 8480+, "
                            "2 TB DDR5, air-cooled with rear-door heat exchanger, so server fans are inside the "
                            "measurement; the logged switch (sw_0.txt) averaged ~690 W, not included"),
        what_is_measured=("whole node AC input ('measurement_type': 'AC', 'conversion_eff': 0.96 in the log), "
                          "MLPerf power logger, one reading per ~1 s"),
        derivation=MLPERF_DERIVATION + "; lora_rank 16 and opt_base_learning_rate 0.0004 in the log match the config",
    ),
    # ---- MLPerf Training v5.0: Lenovo SR780a V3, liquid-cooled B200 (the round's only power submission) -----
    _row(
        id="mlperf50-lenovo-b200-1node-llama2-70b-lora",
        source=(f"MLPerf Training v5.0, Lenovo, {MLPERF_V50}: Lenovo/results/SR780aV3-8xB200_SXM_180GB/"
                "llama2_70b_lora/ (10 runs), Lenovo/systems/SR780aV3-8xB200_SXM_180GB.json, "
                "Lenovo/benchmarks/llama2_70b_lora/config_DGXB200_1x8x1xtp1pp1cp1.sh"),
        quote=MLPERF_LOG_QUOTE + "; system json: '\"cooling\": \"Water-cooled\"'",
        gpu="b200", num_devices=8, devices_per_node=8, num_nodes=1,
        model="llama2-70b", model_note=LORA_NOTE,
        tp=1, pp=1, cp=1, dp=8, micro_batch_size=1, global_batch_size=8, seq_length=8192, precision="fp8",
        measured_node_w=9581.0,
        node_statistic="mean over the run (run means 9,565-9,595 W; max reading 10,096 W)",
        energy_j=6.4449e6, duration_s=673.4,
        node_overhead_note=("Lenovo ThinkSystem SR780a V3: 8 x B200-SXM-180GB, 2 x Xeon Platinum 8562Y+, 2 TB DDR5, "
                            "water-cooled; node = GPUs + CPUs + DRAM + NICs + NVSwitches + pumps/fans + PSU loss"),
        what_is_measured=("whole node AC input ('measurement_type': 'AC', 'conversion_eff': 0.94 in the log), "
                          "MLPerf power logger, one reading per ~1 s"),
        derivation=(MLPERF_DERIVATION + "; 8 runs took ~656 s and 2 took ~743 s (energy median 6.28e6 J); "
                    "TP=1, CP=1, MINIBS=1, FP8_ACT=1, FP8=True (config_common.sh), lora_rank 16"),
    ),
    _row(
        id="mlperf50-lenovo-b200-1node-stable-diffusion",
        source=(f"MLPerf Training v5.0, Lenovo, {MLPERF_V50}: Lenovo/results/SR780aV3-8xB200_SXM_180GB/"
                "stable_diffusion/ (10 runs), Lenovo/benchmarks/stable_diffusion/config_DGXB200_01x08x32.sh"),
        quote=MLPERF_LOG_QUOTE,
        gpu="b200", num_devices=8, devices_per_node=8, num_nodes=1,
        model="MLPerf stable_diffusion (latent-diffusion text-to-image model); no preset",
        dp=8, micro_batch_size=32, global_batch_size=256,
        measured_node_w=10045.0, node_statistic="mean over the run (run means 10,037-10,053 W; max 10,387 W)",
        energy_j=8.5173e6, duration_s=848.9,
        node_overhead_note="as the Lenovo llama2_70b_lora row (same node)",
        what_is_measured="whole node AC input, MLPerf power logger, ~1 s",
        derivation=MLPERF_DERIVATION + "; BATCHSIZE=32 per GPU, global_batch_size 256 in the log",
    ),
    _row(
        id="mlperf50-lenovo-b200-1node-bert",
        source=(f"MLPerf Training v5.0, Lenovo, {MLPERF_V50}: Lenovo/results/SR780aV3-8xB200_SXM_180GB/bert/ "
                "(10 runs), Lenovo/benchmarks/bert/config_DGXB200_1x8x48x1_pack.sh"),
        quote=MLPERF_LOG_QUOTE,
        gpu="b200", num_devices=8, devices_per_node=8, num_nodes=1,
        model="MLPerf bert (BERT-Large pre-training); no preset",
        dp=8, micro_batch_size=48, global_batch_size=768,
        measured_node_w=9756.0, node_statistic="mean over the run (run means 9,693-9,814 W; max 10,177 W)",
        energy_j=2.0812e6, duration_s=214.3,
        node_overhead_note="as the Lenovo llama2_70b_lora row (same node)",
        what_is_measured="whole node AC input, MLPerf power logger, ~1 s",
        derivation=(MLPERF_DERIVATION + "; BATCHSIZE=48 per GPU with PACKING_FACTOR=2 (packed sequences), "
                    "global_batch_size 768 in the log"),
    ),
    _row(
        id="mlperf50-lenovo-b200-1node-retinanet",
        source=(f"MLPerf Training v5.0, Lenovo, {MLPERF_V50}: Lenovo/results/SR780aV3-8xB200_SXM_180GB/retinanet/ "
                "(5 runs), Lenovo/benchmarks/retinanet/config_DGXB200_001x08x032.sh"),
        quote=MLPERF_LOG_QUOTE,
        gpu="b200", num_devices=8, devices_per_node=8, num_nodes=1,
        model="MLPerf retinanet (RetinaNet object detection); no preset",
        dp=8, micro_batch_size=32, global_batch_size=256,
        measured_node_w=9569.0, node_statistic="mean over the run (run means 9,555-9,579 W; max 10,422 W)",
        energy_j=1.2826e7, duration_s=1341.0,
        node_overhead_note="as the Lenovo llama2_70b_lora row (same node)",
        what_is_measured="whole node AC input, MLPerf power logger, ~1 s",
        derivation=MLPERF_DERIVATION + "; BATCHSIZE=32 per GPU, global_batch_size 256 in the log",
    ),
    # ---- TPU v4 ----------------------------------------------------------------------------------------------
    _row(
        id="tpu-v4-chip-mean",
        source=("Google Cloud TPU documentation, 'TPU v4' system architecture page (docs.cloud.google.com/tpu/docs/"
                "v4), key-specifications table; the page cites Jouppi et al., 'TPU v4: An Optically Reconfigurable "
                "Supercomputer for Machine Learning with Hardware Support for Embeddings', ISCA 2023 "
                "(arXiv 2304.01433)"),
        quote="| Measured min/mean/max power  | 90/170/192 W |",
        gpu="tpu-v4", num_devices=1,
        model="Google production ML workloads (not one LLM)",
        measured_w_per_device=170.0, node_statistic=None,
        node_overhead_note="chip only (min 90 W, max 192 W); hosts, OCS and cooling not included",
        what_is_measured="per-chip power, mean over measured workloads (method not stated on the page)",
    ),
    _row(
        id="tpu-v4-vs-a100-system-power",
        kind="ratio",
        source=("Jouppi et al., 'TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning with "
                "Hardware Support for Embeddings', ISCA 2023 (arXiv 2304.01433), abstract (MLPerf Training 2.0 "
                "BERT / ResNet comparison in the body)"),
        quote=("For similar sized systems, it is ~4.3x-4.5x faster than the Graphcore IPU Bow and is 1.2x-1.7x "
               "faster and uses 1.3x-1.9x less power than the Nvidia A100."),
        gpu="tpu-v4",
        model="MLPerf Training 2.0 BERT and ResNet-50",
        node_overhead_note="system-level comparison; no absolute watts in the quoted sentence",
        what_is_measured="ratio of system power, TPU v4 vs A100 systems of similar size",
    ),
    # ---- torchtitan: H100 runs at a 500 W power limit (no reading) -------------------------------------------
    _row(
        id="torchtitan-h100-500w-cap",
        kind="cap_only",
        source="pytorch/torchtitan docs/performance.md (commit eaea6f6a2fa940f03a10906be1df3489cf30af85), Table 1",
        quote=("Each H100 GPU is equipped with 96GB HBM2e with 2.4 TB/sec peak memory bandwidth. [...] We used the "
               "default 500W power limit, although tuning it up to 700W TDP can potentially provide further "
               "speedups."),
        gpu="h100-sxm-80gb",
        gpu_note=("Grand Teton H100 with 96 GB HBM2e at 2.4 TB/s and a 500 W default limit ('HBM2e-based SXM H100 "
                  "with lower TDP'), not the 80 GB HBM3 / 3.35 TB/s / 700 W preset"),
        num_devices=8, devices_per_node=8, num_nodes=1,
        model="llama3-8b",
        model_note=("Llama 3.1 8B; Table 1 (selective activation checkpointing): FSDP + torch.compile + Float8 "
                    "gives 8,532 TPS/GPU; Float8 only on nn.Linear, the rest BF16"),
        dp=8, micro_batch_size=2, global_batch_size=16, precision="fp8",
        power_limit_w=500.0,
        node_overhead_note="no power reading published",
        what_is_measured="nothing: a power cap of 500 W per GPU during the throughput runs",
    ),
    # ---- Llama 3 (Meta 2024): TDP only, data-centre fluctuation ------------------------------------------------
    _row(
        id="llama3-405b-tdp-and-fluctuation",
        kind="tdp_only",
        source=("Llama Team, AI @ Meta, 'The Llama 3 Herd of Models', arXiv 2407.21783 (2024), Sec. 3.3.1 "
                "(Compute), Table 4, Sec. 3.3.4"),
        quote=("Llama 3 405B is trained on up to 16K H100 GPUs, each running at 700W TDP with 80GB HBM3, using "
               "Meta's Grand Teton AI server platform. [...] During training, tens of thousands of GPUs may "
               "increase or decrease power consumption at the same time, for example, due to all GPUs waiting for "
               "checkpointing or collective communications to finish, or the startup or shutdown of the entire "
               "training job. When this happens, it can result in instant fluctuations of power consumption "
               "across the data center on the order of tens of megawatts, stretching the limits of the power grid."),
        gpu="h100-sxm-80gb", num_devices=16384, devices_per_node=8, num_nodes=2048,
        model="llama3-405b",
        model_note=("Table 4 row '16,384 | 8 | 1 | 16 | 128 | 8,192 | 16 | 16M | 400 | 41%' "
                    "(GPUs, TP, CP, PP, DP, seq, batch/DP, tokens/batch, TFLOPs/GPU 400, BF16 MFU 41%)"),
        tp=8, pp=16, cp=1, dp=128, global_batch_size=2048, seq_length=8192, precision="bf16",
        node_overhead_note="no reading: TDP (700 W) and a qualitative data-centre-level fluctuation only",
        what_is_measured="nothing per device; data-centre power swings of 'tens of megawatts'",
        derivation="global_batch_size = 16 sequences per DP group x 128 DP groups (Table 4: 16M tokens / 8,192)",
    ),
    # ---- Zeus (You et al., NSDI 2023): GPU share of server power -----------------------------------------------
    _row(
        id="zeus-gpu-share-of-server",
        kind="ratio",
        source=("Zeus project page (ml.energy/zeus/research_overview/zeus), accompanying You, Chung, Chowdhury, "
                "'Zeus: Understanding and Optimizing GPU Energy Consumption of DNN Training', NSDI 2023; the page "
                "footnotes the figure to earlier work"),
        quote=("GPUs are power-hungry hardware; GPUs consume ~ 70% of the power of the entire server when "
               "training DNNs."),
        model="DNN training in general",
        node_overhead_note="GPU share of server power ~0.70, i.e. the rest of the server ~30 %",
        what_is_measured="secondary ratio, not a reading from a run described here",
    ),
]


def mlperf_run_power(result_txt: str, node_txts: list[str]) -> dict:
    """Mean node power (W) and energy (J) of one MLPerf Training power run, from the text of its
    ``result_N.txt`` and of its ``power/result_N/node_*.txt`` logs: the readings between run_start and run_stop."""

    def records(text):
        for line in text.splitlines():
            at = line.find(":::MLLOG")
            if at >= 0:
                try:
                    yield json.loads(line[at + len(":::MLLOG"):])
                except json.JSONDecodeError:
                    continue

    result = list(records(result_txt))
    t0 = next(r["time_ms"] for r in result if r["key"] == "run_start")
    t1 = next(r["time_ms"] for r in result if r["key"] == "run_stop")
    means, energy = [], 0.0
    for text in node_txts:
        pts = [(r["time_ms"], float(r["value"])) for r in records(text)
               if r["key"] == "power_reading" and t0 <= r["time_ms"] <= t1]
        means.append(mean(v for _, v in pts))
        energy += sum((b[0] - a[0]) / 1000.0 * (a[1] + b[1]) / 2.0 for a, b in zip(pts, pts[1:]))
    return {"duration_s": (t1 - t0) / 1000.0, "mean_node_w": mean(means), "energy_j": energy}


def measurements(kind: str | None = "measurement") -> list[dict]:
    """The rows of one kind (``None``: all rows)."""
    return [m for m in MEASUREMENTS if kind is None or m["kind"] == kind]


if __name__ == "__main__":
    for m in MEASUREMENTS:
        per_dev = f"{m['measured_w_per_device']:7.0f} W/dev" if m["measured_w_per_device"] else " " * 13
        node = f"{m['measured_node_w']:7.0f} W/node" if m["measured_node_w"] else " " * 14
        print(f"{m['id']:48s} {m['kind']:11s} {per_dev} {node}  {m['gpu'] or '-':14s} x{m['num_devices'] or '-'}")
    kinds = [m["kind"] for m in MEASUREMENTS]
    print(json.dumps({"rows": len(MEASUREMENTS), "by_kind": {k: kinds.count(k) for k in dict.fromkeys(kinds)}}))
