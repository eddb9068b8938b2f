"""The step model's terms, one module each, bottom up: workload (shapes, FLOPs, activations),
efficiency (fitted constants), kernels, collectives, memory, feasibility, energy, and model
(`evaluate`: the training step)."""
