"""The int8 kernels: QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger (emitter.py), and
the u8/s8 MaxPool in NCHW (pool.py, called by emit_pool)."""
