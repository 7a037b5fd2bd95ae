"""ResNet-50 (torchvision) with DistributedDataParallel, reading the data stage's LMDB through
LMDBImageNet and DataLoader workers (Caffe2's path in the study, PyTorch's now).

FP16 is mixed precision: torch.autocast float16 with a GradScaler on a GPU; on a CPU,
autocast bfloat16 (the CPU's mixed-precision type).
"""
import os

import torch
import torch.distributed as dist
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torchvision.transforms import v2 as T

from ..common.errors import run_main
from ..data.lmdb_dataset import LMDBImageNet
from . import harness

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _loader(run, device):
    a, launch = run.args, run.launch
    if a.data_source == "synthetic":
        classes = a.classes or 1000
        g = torch.Generator().manual_seed(a.seed + launch.rank)
        x = torch.randn(a.batch_per_gpu, 3, a.image_size, a.image_size, generator=g).to(device)
        y = torch.randint(0, classes, (a.batch_per_gpu,), generator=g).to(device)
        return classes, 0, None, lambda: (x, y)
    classes = harness.classes_of(a.data)
    tf = T.Compose([T.RandomResizedCrop(a.image_size, antialias=True), T.RandomHorizontalFlip(),
                    T.PILToTensor(), T.ToDtype(torch.float32, scale=True), T.Normalize(MEAN, STD)])
    ds = LMDBImageNet(os.path.join(a.data, "train"), transform=tf)
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=launch.world_size, rank=launch.rank, shuffle=True, seed=a.seed, drop_last=True)
    workers = a.decode_threads or max(1, (os.cpu_count() or 2) // launch.local_size - 1)
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_per_gpu, sampler=sampler, num_workers=workers,
                                         pin_memory=device.type == "cuda", drop_last=True,
                                         persistent_workers=True, prefetch_factor=4)
    state = {"epoch": 0, "it": None}

    def next_batch():
        while True:
            if state["it"] is None:
                sampler.set_epoch(state["epoch"])
                state["it"] = iter(loader)
            try:
                x, y = next(state["it"])
                return x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            except StopIteration:
                state["epoch"] += 1
                state["it"] = None

    return classes, len(ds), workers, next_batch


def _digest(model):
    return harness.weights_digest(p.detach().float().cpu().numpy() for p in model.parameters())


def main():
    args = harness.arg_parser(__doc__.splitlines()[0]).parse_args()
    run = harness.Run(args, "pytorch", {"torch": torch.__version__, "torchvision": torchvision.__version__})
    launch = run.launch
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", launch.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:  # ranks share the host's cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // launch.local_size))
    if launch.world_size > 1:
        dist.init_process_group("nccl" if cuda else "gloo", rank=launch.rank, world_size=launch.world_size,
                                init_method=f"tcp://{launch.master_addr}:{launch.master_port}")
    torch.manual_seed(args.seed)
    classes, train_images, workers, next_batch = _loader(run, device)
    # Zero-initialised last BN of each residual block (Goyal et al., as NVIDIA's ResNet-50 recipes):
    # every block starts as identity, which keeps the first steps from scratch stable.
    model = torchvision.models.resnet50(num_classes=classes, zero_init_residual=True).to(device)
    ddp = DDP(model) if launch.world_size > 1 else model
    opt = torch.optim.SGD(model.parameters(), lr=run.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    amp_dtype = (torch.float16 if cuda else torch.bfloat16) if args.precision == "fp16" else None
    scaler = torch.amp.GradScaler(enabled=amp_dtype == torch.float16)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = run.total_steps(train_images)
    model.train()
    run.log.start()
    for step in range(steps):
        x, y = next_batch()
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = loss_fn(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        # The mean loss over ranks; .item() waits for the step, so the step's time is complete.
        if launch.world_size > 1:
            loss = loss.detach().clone()
            dist.all_reduce(loss)
            loss /= launch.world_size
        run.log.end(loss.item())
        if step == 0:
            run.record_digest("after_step_1", _digest(model))
    run.record_digest("final", _digest(model))
    if launch.rank == 0:
        torch.save(model.state_dict(), os.path.join(args.out, "weights.pt"))
    run.finish({"device": torch.cuda.get_device_name(device) if cuda else "cpu", "classes": classes,
                "train_images": train_images, "loader_workers": workers,
                "amp_dtype": str(amp_dtype).replace("torch.", "") if amp_dtype else "float32"})
    if launch.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    run_main(main)
