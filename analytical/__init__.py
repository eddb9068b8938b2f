"""DeepFlow's analytical model: pure, batch-first functions over float64 torch tensors.

    from analytical import evaluate, single_design, AcceleratorSpec, SystemSpec, ModelSpec, MappingSpec
    result = evaluate(single_design(accelerator, system, model, mapping))

No Hydra or MLflow here: anyone can call it from a notebook.
"""

from analytical.design import DesignBatch, single_design, stack_designs
from analytical.efficiency import DEFAULT_EFFICIENCY, Efficiency
from analytical.feasibility import REASON_TEXT, Reason
from analytical.specs import AcceleratorSpec, MappingSpec, ModelSpec, SpecError, SystemSpec
from analytical.step import TIME_PARTS, StepResult, evaluate

__all__ = ["AcceleratorSpec", "DEFAULT_EFFICIENCY", "DesignBatch", "Efficiency", "MappingSpec", "ModelSpec",
           "REASON_TEXT", "Reason", "SpecError", "StepResult", "SystemSpec", "TIME_PARTS", "evaluate",
           "single_design", "stack_designs"]
