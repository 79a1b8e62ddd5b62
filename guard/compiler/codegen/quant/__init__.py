"""The int8 kernels: QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger (emitter.py)."""
