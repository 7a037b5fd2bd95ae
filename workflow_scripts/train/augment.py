"""The training augmentation's constants, one definition for PyTorch's three input paths (cpu,
gpu_input, dali_input) and their options: torchvision's RandomResizedCrop parameters, ImageNet's
mean and standard deviation (of pixel values scaled to 0-1). The decoders each path offers are the
schema's (training.pytorch.jpeg_decoder, dali_decoder)."""

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)  # RandomResizedCrop's defaults, as the CPU path uses
