"""What the PyTorch scripts in this directory (torch_flatten.py, real_graphs.py) do to a model
before capturing it."""

import torch


def warmed(make, shape):
    """`make()`'s model on the GPU in eval mode, run three times on a side stream (so that lazy
    initialization is not captured), with a random input of `shape` and an output tensor for
    the graph to write: `(model, static_in, static_out)`.

    The output tensor is allocated outside the graph's memory pool: a tensor the graph allocates
    shares its block with intermediates freed earlier in the graph (measured on ResNet-18: 9 of
    the 118 kernels before the final GEMV pass the output's address for intermediates), and
    relocating an allocation moves every pointer into its range."""
    torch.manual_seed(0)
    model = make().cuda().eval()
    static_in = torch.randn(shape, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():
        static_out = torch.empty_like(model(static_in))
    return model, static_in, static_out
