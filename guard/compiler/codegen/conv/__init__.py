"""guard.compiler.codegen.conv: the convolution family. Schedules, the direct-convolution
kernels and the registered emitter."""
