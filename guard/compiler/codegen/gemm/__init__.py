"""guard.compiler.codegen.gemm: the GEMM family. Schedules, micro-kernels, the llvmlite
emitter, the BLAS call path and the registered emitter."""
