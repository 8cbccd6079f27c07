"""Run under torchrun: every tpu_dist collective gives what Gloo gives on CPU tensors.

With one rank, the main collectives run on the device transport (a group of one process is a
client of one process, so they are device programs); with two on the CPU plugin, on the host
transport. The report says how many ran on the device.

Each check runs the same collective twice on identical data: on tpu tensors through the default
tpu_dist group and on CPU tensors through a Gloo group, and requires equal results (dtype, shape
and values), with contiguous tensors and with non-contiguous views as inputs and outputs.
"""

import os

import torch
import torch.distributed as dist

import torch_tpu

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
torch.tpu.set_device(int(os.environ["LOCAL_RANK"]))
device = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
dist.init_process_group("tpu_dist")
gloo = dist.new_group(backend="gloo")
checks = 0
last = world - 1  # the source rank of broadcast and scatter: not rank 0, where there are two

DTYPES = (torch.float32, torch.bfloat16, torch.int64)
SHAPES = ((4,), (3, 6), (2, 3, 4))


def data(shape, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator) * 3).to(dtype)
    return torch.randint(-5, 6, shape, generator=generator).to(dtype)


def view(tensor, noncontiguous):
    """`tensor` itself, or a non-contiguous view with the same values (a transposed copy's .t()
    for 2-d and more, every other element of a larger tensor for 1-d)."""
    if not noncontiguous:
        return tensor
    if tensor.dim() >= 2:
        return tensor.transpose(0, 1).contiguous().transpose(0, 1)
    wide = torch.zeros(tensor.shape[0] * 2, dtype=tensor.dtype, device=tensor.device)
    wide[::2] = tensor
    return wide[::2]


def same(tpu_tensor, cpu_tensor, what):
    global checks
    checks += 1
    assert tpu_tensor.device.type == "tpu", what
    result = tpu_tensor.cpu()
    assert result.dtype == cpu_tensor.dtype and result.shape == cpu_tensor.shape, what
    assert torch.equal(result, cpu_tensor), f"{what}: {result} != {cpu_tensor}"


def both(make, run, what, noncontiguous):
    """make(device) -> tensors (list); run(tensors, group); compare every tensor after."""
    cpu = make("cpu")
    tpu = [view(t.to(device), noncontiguous) for t in cpu]
    run(cpu, gloo)
    run(tpu, None)
    for index, (a, b) in enumerate(zip(tpu, cpu)):
        same(a, b, f"{what} tensor {index} noncontiguous={noncontiguous}")


REDUCE_OPS = {
    torch.float32: ["SUM", "PRODUCT", "MIN", "MAX"],
    torch.bfloat16: ["SUM", "MIN", "MAX"],
    torch.int64: ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"],
}

for dtype in DTYPES:
    for shape in SHAPES:
        for nc in (False, True):
            tag = f"{dtype} {shape}"
            seed = 1000 * rank + len(shape)
            both(lambda d: [data(shape, dtype, seed)],
                 lambda t, g: dist.broadcast(t[0], src=last, group=g), f"broadcast {tag}", nc)
            for op in REDUCE_OPS[dtype]:
                both(lambda d: [data(shape, dtype, seed)],
                     lambda t, g: dist.all_reduce(t[0], op=getattr(dist.ReduceOp, op), group=g),
                     f"all_reduce {op} {tag}", nc)
            both(lambda d: [data(shape, dtype, seed)],
                 lambda t, g: dist.reduce(t[0], dst=0, group=g), f"reduce {tag}", nc)
            # all_gather: one input, world outputs.
            both(lambda d: [data(shape, dtype, seed)] + [torch.zeros(shape, dtype=dtype) for _ in range(world)],
                 lambda t, g: dist.all_gather(t[1:], t[0], group=g), f"all_gather {tag}", nc)
            both(lambda d: [data(shape, dtype, seed),
                            torch.zeros((world * shape[0],) + shape[1:], dtype=dtype)],
                 lambda t, g: dist.all_gather_into_tensor(t[1], t[0], group=g),
                 f"all_gather_into_tensor {tag}", nc)
            both(lambda d: [torch.zeros(shape, dtype=dtype)] +
                 [data(shape, dtype, seed + 7 * i) for i in range(world)],
                 lambda t, g: dist.reduce_scatter(t[0], t[1:], group=g),
                 f"reduce_scatter {tag}", nc)
            both(lambda d: [torch.zeros(shape, dtype=dtype),
                            data((world * shape[0],) + shape[1:], dtype, seed)],
                 lambda t, g: dist.reduce_scatter_tensor(t[0], t[1], group=g),
                 f"reduce_scatter_tensor {tag}", nc)
            both(lambda d: [data((world * shape[0],) + shape[1:], dtype, seed),
                            torch.zeros((world * shape[0],) + shape[1:], dtype=dtype)],
                 lambda t, g: dist.all_to_all_single(t[1], t[0], group=g),
                 f"all_to_all_single {tag}", nc)
            both(lambda d: [data(shape, dtype, seed + i) for i in range(world)] +
                 [torch.zeros(shape, dtype=dtype) for _ in range(world)],
                 lambda t, g: dist.all_to_all(t[world:], t[:world], group=g),
                 f"all_to_all {tag}", nc)
            both(lambda d: [data(shape, dtype, seed)] +
                 [torch.zeros(shape, dtype=dtype) for _ in range(world if rank == 0 else 0)],
                 lambda t, g: dist.gather(t[0], t[1:] if rank == 0 else None, dst=0, group=g),
                 f"gather {tag}", nc)
            both(lambda d: [torch.zeros(shape, dtype=dtype)] +
                 [data(shape, dtype, seed + i) for i in range(world if rank == last else 0)],
                 lambda t, g: dist.scatter(t[0], t[1:] if rank == last else None, src=last,
                                           group=g),
                 f"scatter {tag}", nc)

            def send_recv(t, g):
                if rank == 0:
                    dist.send(t[0], dst=1, group=g)
                    dist.recv(t[1], src=1, group=g)
                else:
                    dist.recv(t[1], src=0, group=g)
                    dist.send(t[0], dst=0, group=g)

            if world > 1:  # a rank has no peer to send to in a group of one
                both(lambda d: [data(shape, dtype, seed), torch.zeros(shape, dtype=dtype)],
                     send_recv, f"send/recv {tag}", nc)

# AVG and PREMUL_SUM: Gloo has neither; tpu_dist sums over Gloo and divides (AVG) or scales the
# inputs first (PREMUL_SUM). Compared with what Gloo gives for the same definition on CPU.
for dtype in (torch.float32, torch.bfloat16):
    for nc in (False, True):
        x = data((3, 6), dtype, rank)
        expected = x.clone()
        dist.all_reduce(expected, group=gloo)
        y = view(x.to(device), nc)
        dist.all_reduce(y, op=dist.ReduceOp.AVG)
        same(y, expected / world, f"all_reduce AVG {dtype}")
        on_cpu = view(x.clone(), nc)  # tpu_dist serves CPU tensors too
        dist.all_reduce(on_cpu, op=dist.ReduceOp.AVG)
        assert torch.equal(on_cpu, expected / world), f"all_reduce AVG of CPU tensors {dtype}"
        scaled = x * 0.25
        dist.all_reduce(scaled, group=gloo)
        y = view(x.to(device), nc)
        dist.all_reduce(y, op=dist._make_nccl_premul_sum(0.25))
        same(y, scaled, f"all_reduce PREMUL_SUM {dtype}")
        big = data((world * 4, 3), dtype, rank)
        expected = torch.zeros(4, 3, dtype=dtype)
        dist.reduce_scatter_tensor(expected, big, group=gloo)
        out = torch.zeros(4, 3, dtype=dtype, device=device)
        dist.reduce_scatter_tensor(out, big.to(device), op=dist.ReduceOp.AVG)
        same(out, expected / world, f"reduce_scatter_tensor AVG {dtype}")
try:
    dist.all_reduce(torch.ones(3, dtype=torch.int64, device=device), op=dist.ReduceOp.AVG)
    raise AssertionError("AVG on int64 did not raise")
except RuntimeError as error:
    assert str(error).split("\n")[0] == \
        "tpu_dist allreduce: ReduceOp.AVG needs floating-point tensors, got Long", str(error)

# Coalesced variants (torch.distributed's coalescing manager calls the backend's *_coalesced).
def coalesced(collective, outputs_of, inputs, nc, on_device=False, async_ops=False):
    """`collective(output, input, group)` for every input inside one coalescing manager, on CPU
    over Gloo and on tpu; outputs_of(device) makes the outputs (None: in place). `on_device`:
    the manager names the tpu device (the backend's start/endCoalescing bracket the calls, as
    FSDP2 and DDP use it on GPUs)."""
    results = {}
    for where, group in (("cpu", gloo), ("tpu", None)):
        ins = [i.clone() if where == "cpu" else view(i.to(device), nc) for i in inputs]
        outs = outputs_of(where)
        outs = ins if outs is None else [o if where == "cpu" else view(o.to(device), nc)
                                         for o in outs]
        manager_device = device if on_device and where == "tpu" else None
        with dist._coalescing_manager(group=group, device=manager_device,
                                      async_ops=async_ops) as manager:
            for o, i in zip(outs, ins):
                collective(o, i, group)
        if async_ops:
            manager.wait()
        results[where] = outs
    for a, b in zip(results["tpu"], results["cpu"]):
        same(a, b, f"{collective.__name__} coalesced noncontiguous={nc} device={on_device} "
                   f"async={async_ops}")


def all_gather_into(o, i, g):
    dist.all_gather_into_tensor(o, i, group=g)


def reduce_scatter_into(o, i, g):
    dist.reduce_scatter_tensor(o, i, group=g)


def all_reduce_in_place(o, i, g):
    dist.all_reduce(i, group=g)


for nc in (False, True):
    inputs = [data((4, 3), torch.float32, rank + i) for i in range(3)]
    coalesced(all_gather_into, lambda d: [torch.zeros(world * 4, 3) for _ in inputs], inputs, nc)
    scattered = lambda d: [torch.zeros(4 // world, 3) for _ in inputs]  # noqa: E731
    coalesced(reduce_scatter_into, scattered, inputs, nc)
    coalesced(all_reduce_in_place, lambda d: None, inputs, nc)
    for async_ops in (False, True):
        coalesced(all_gather_into, lambda d: [torch.zeros(world * 4, 3) for _ in inputs], inputs,
                  nc, True, async_ops)
        coalesced(reduce_scatter_into, scattered, inputs, nc, True, async_ops)
        coalesced(all_reduce_in_place, lambda d: None, inputs, nc, True, async_ops)

# Asynchronous works: wait(), is_completed(), the future's value; CPU tensors and objects.
x = torch.full((1024,), float(rank + 1), device=device)
work = dist.all_reduce(x, async_op=True)
work.wait()
assert work.is_completed()
same(x, torch.full((1024,), float(sum(range(1, world + 1)))), "async all_reduce")
future = dist.all_reduce(x, async_op=True).get_future()
same(future.wait()[0], torch.full((1024,), float(world * sum(range(1, world + 1)))), "future")
cpu_tensor = torch.full((5,), float(rank))
dist.all_reduce(cpu_tensor)
assert torch.equal(cpu_tensor, torch.full((5,), float(sum(range(world)))))
objects = [None] * world
dist.all_gather_object(objects, {"rank": rank})
assert objects == [{"rank": r} for r in range(world)], objects
dist.barrier()

# A synchronous all_reduce may update the tensor's device buffer in place (CPU plugin): values
# read from it before (a copy, a program still running) keep the old values, views see the new.
for size in (8, 1 << 16):
    x = torch.full((size,), float(rank + 1), device=device)
    x_view = x.view(2, -1)
    before = x * 1
    clone = x.clone()
    dist.all_reduce(x)
    total = float(sum(range(1, world + 1)))
    same(x, torch.full((size,), total), "all_reduce updated in place")
    same(x_view, torch.full((2, size // 2), total), "a view of the updated tensor")
    same(before, torch.full((size,), float(rank + 1)), "a value computed before the update")
    same(clone, torch.full((size,), float(rank + 1)), "a clone taken before the update")

# Bad input raises naming the op, shapes and dtypes.
try:
    dist.all_gather_into_tensor(torch.zeros(5, device=device), torch.zeros(2, device=device))
    raise AssertionError("no error")
except (RuntimeError, ValueError) as error:
    message = str(error).split("\n")[0]
    assert message == (f"tpu_dist allgather_into_tensor: the output must hold world size ({world}) "
                       "times the input's 2 elements, got 5"), message

dist.destroy_process_group()
on_device = torch_tpu.metrics()["device_collectives"]
print(f"rank {rank}: {checks} collective checks match gloo, {on_device} on the device", flush=True)
