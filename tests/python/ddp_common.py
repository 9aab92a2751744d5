"""The training both test_ddp's ranks and its one-process reference run: a small MLP on
the breast-cancer sample, SGD with momentum, the same global batches."""

import torch

import enclave

EPOCHS, BATCH, LR = 3, 16, 0.05  # BATCH rows per rank per step


def model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(30, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def optimizer(parameters):
    return torch.optim.SGD(parameters, lr=LR, momentum=0.9)


def scaling(ds):
    x, _ = (torch.from_dlpack(t) for t in ds.gather(list(range(len(ds)))))
    return x.mean(0), x.std(0, unbiased=False).clamp_min(1e-12)


def batches(ds, epoch, rank, world_size):
    """Rank `rank`'s part of each global batch: rows r, r + world_size, ... of its epoch."""
    return enclave.torch_batches(ds, BATCH, shuffle=True, seed=epoch, rank=rank, world_size=world_size)


def step(net, opt, x, y, scale):
    mean, std = scale
    loss = torch.nn.functional.cross_entropy(net((x - mean) / std), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss)


def flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])
