"""DeepFlow's analytical model: pure, batch-first functions over float64 torch tensors.

    from analytical import evaluate, single_design, AcceleratorSpec, SystemSpec, ModelSpec, MappingSpec
    result = evaluate(single_design(accelerator, system, model, mapping))

No Hydra or MLflow here: anyone can call it from a notebook.
"""

from analytical.build import single_design, stack_designs
from analytical.codes import REASON_TEXT, Reason
from analytical.design import DesignBatch
from analytical.result import StepResult
from analytical.specs import AcceleratorSpec, MappingSpec, ModelSpec, SpecError, SystemSpec
from analytical.step.efficiency import DEFAULT_EFFICIENCY, Efficiency
from analytical.step.model import TIME_PARTS, evaluate

__all__ = ["AcceleratorSpec", "DEFAULT_EFFICIENCY", "DesignBatch", "Efficiency", "MappingSpec", "ModelSpec",
           "REASON_TEXT", "Reason", "SpecError", "StepResult", "SystemSpec", "TIME_PARTS", "evaluate",
           "single_design", "stack_designs"]
