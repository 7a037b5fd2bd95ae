"""The study's seven networks (Table III), by config name: torchvision's model names."""

# Config name (= torchvision's name) -> the name Table III gives it.
NETWORKS = {
    "resnet50": "ResNet-50",
    "resnet101": "ResNet-101",
    "resnet152": "ResNet-152",
    "vgg16": "VGG-16",
    "vgg19": "VGG-19",
    "googlenet": "GoogLeNet",
    "alexnet": "AlexNet",
}
