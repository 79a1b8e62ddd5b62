"""guard.compiler.runtime: running a compiled plan. The one-arena runtime (engine), the
weights blob, the self-contained artefact directory and its manifest's keys
(artefact_json), and the ONNX backend-test adapter (conformance)."""
