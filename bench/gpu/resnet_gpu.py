"""The Python peer of bench_resnet_gpu: the same epoch with torchvision.models.resnet18
(10 classes) on the same kind of data made on the GPU, SGD with the same settings, float16
autocast with torch.amp.GradScaler for --amp 1. Prints RESULT lines with the same fields.

  python3 bench/gpu/resnet_gpu.py --images 20000 --batch 256 --amp 1 --epochs 3
"""
import argparse
import time

import torch
import torch.nn.functional as F
import torchvision


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--images", type=int, default=20000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--amp", type=int, default=0)
    a = p.parse_args()
    dev = torch.device("cuda:0")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    images = torch.randn(a.images, 3, 32, 32, device=dev)
    labels = torch.randint(0, 10, (a.images,), device=dev)
    model = torchvision.models.resnet18(num_classes=10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=bool(a.amp))
    steps = a.images // a.batch
    for epoch in range(a.epochs):
        torch.cuda.synchronize()
        if epoch == 1:
            torch.cuda.reset_peak_memory_stats(dev)
        t0 = time.perf_counter()
        for s in range(steps):
            x = images[s * a.batch:(s + 1) * a.batch]
            y = labels[s * a.batch:(s + 1) * a.batch]
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16, enabled=bool(a.amp)):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        torch.cuda.synchronize()
        sec = time.perf_counter() - t0
        if epoch == 0:
            continue
        peak = torch.cuda.max_memory_allocated(dev) / 2**20
        print(f"RESULT impl=python model=resnet18 amp={a.amp} batch={a.batch} epoch={epoch} images={steps * a.batch} "
              f"seconds={sec:.4f} images_per_s={steps * a.batch / sec:.1f} peak_mib={peak:.1f}", flush=True)


if __name__ == "__main__":
    main()
