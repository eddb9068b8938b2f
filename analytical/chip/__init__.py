"""The chip derivation: technology tables -> silicon -> a chip's budgets -> the accelerator it gives."""
