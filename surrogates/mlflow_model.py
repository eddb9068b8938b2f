"""The code of DeepFlow's MLflow surrogate model (models-from-code: MLflow copies this file next to
the model's artifacts and runs it to get the model; nothing is pickled). The model's state comes
from its artifacts in `SurrogatePyfunc.load_context` (`surrogates/pyfunc.py`)."""

from mlflow.models import set_model

from surrogates.pyfunc import SurrogatePyfunc

set_model(SurrogatePyfunc())
