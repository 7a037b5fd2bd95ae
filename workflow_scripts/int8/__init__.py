"""The inference stage (paper section V): the study's seven networks exported to ONNX, INT8
calibration into an explicitly quantized (Q/DQ) model, FP32 and INT8 engines (ONNX Runtime on
the CPU, TensorRT on a GPU), top-1/top-5 accuracy (Table III) and images/s by batch size (Fig. 9).

Modules that need torch, onnx or onnxruntime import them inside; split.py and tables.py run with
the workflow's own interpreter."""
