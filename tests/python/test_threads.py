"""Launches from several threads: writes to disjoint views of one storage are never lost."""

import threading

import torch


def test_concurrent_writes_to_disjoint_halves_of_one_storage():
    x = torch.ones(2, 64, device="tpu")
    halves = [x[0], x[1]]
    errors = []

    def work(half):
        try:
            for _ in range(200):
                half.add_(1)
        except Exception as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(half,)) for half in halves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert torch.equal(x.cpu(), torch.full((2, 64), 201.0))


def test_concurrent_independent_work_matches_cpu():
    inputs = [torch.randn(32, 32) for _ in range(4)]
    results = [None] * len(inputs)

    def work(i):
        y = inputs[i].to("tpu")
        for _ in range(20):
            y = torch.tanh(y @ y.t() / 32)
        results[i] = y.cpu()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for x, result in zip(inputs, results):
        expected = x
        for _ in range(20):
            expected = torch.tanh(expected @ expected.t() / 32)
        torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-5)
