"""The inference stage (paper section V): the study's seven networks exported to ONNX, INT8
calibration into an explicitly quantized (Q/DQ) model, FP32 and INT8 engines (ONNX Runtime on
the CPU, TensorRT on a GPU), top-1/top-5 accuracy (Table III) and images/s by batch size (Fig. 9).

Modules that need torch, onnx or onnxruntime import them inside; `split` and `int8_tables` run
with the workflow's own interpreter.

    `split`            the val set split into calibration and scored images
    `val_images`       val images as the networks see them, from the LMDB
    `image_lists`      the stage's TSV lists of images, written whole or not at all
    `networks`         the study's seven networks by config name
    `models`           those networks and where their weights come from
    `fetch_weights`    torchvision's weights fetched where snakemake runs, before any job needs them
    `export`           one network to an FP32 ONNX model, checked against PyTorch
    `calibrate`        per-tensor ranges over the calibration images
    `quantize`         the Q/DQ INT8 model from those ranges
    `qdq_rules`        TensorRT's rules a Q/DQ graph is checked against before it reaches a GPU
    `engines`          ONNX Runtime and TensorRT behind one interface
    `build_engine`     one engine built from its ONNX model
    `tensorrt_engine`  TensorRT engines on one GPU
    `engine_imports`   whether an interpreter imports TensorRT and pycuda, and the install that fits it
    `evaluate`         top-1 and top-5 of one engine over the scored images
    `throughput`       images/s of FP32 and INT8 at one batch size, timed in one process
    `timing_job`       every network and batch size of Fig. 9 timed in one job, each pair by throughput
    `int8_tables`      the stage's two tables (Table III, Fig. 9's data)
"""
