"""byoc-int8: PyTorch CNNs -> all-int8 programs through TVM's BYOC flow (codegen ``ccompiler``).

The one-call API is :func:`compile_model` (model + calibration data -> :class:`CompiledModel`,
one loadable ``.so``) and :func:`evaluate` (the report). The stages are importable on their own:
``frontend``, ``partition``, ``calibrate``, ``quantize``, ``reference``, ``codegen``, ``build``.
"""

from .pipeline import CompiledModel, compile_model, evaluate

__all__ = ["CompiledModel", "compile_model", "evaluate"]
