"""The float convolution shapes the library's tests run (`test_conv`, `test_conv_epilogue`,
the AVX2 subprocess of `test_cpu`), in a module of their own: a test module imported by
name from another could resolve to a namesake elsewhere in the tests."""

# (batch, channels, height, width, out channels, kernel (h, w), strides, dilation, groups,
#  pads (top, left, bottom, right)); depthwise and grouped ones as in shufflenet.
CASES = [
    (2, 16, 9, 7, 6, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
    (1, 32, 8, 11, 8, (3, 2), (1, 1), (2, 1), 2, (2, 0, 1, 3)),
    (1, 16, 5, 5, 32, (1, 1), (1, 1), (1, 1), 1, (0, 0, 0, 0)),
    (3, 3, 13, 11, 5, (7, 7), (2, 2), (1, 1), 1, (3, 2, 3, 4)),
    (1, 24, 9, 9, 24, (3, 3), (2, 2), (1, 1), 24, (1, 1, 1, 1)),
    (1, 24, 7, 7, 24, (3, 3), (1, 1), (1, 1), 24, (1, 1, 1, 1)),
    (1, 12, 6, 6, 24, (1, 1), (1, 1), (1, 1), 3, (0, 0, 0, 0)),
    (2, 4, 10, 9, 8, (3, 3), (1, 3), (2, 2), 4, (0, 1, 2, 0)),
    (1, 8, 5, 6, 4, (2, 3), (3, 2), (1, 1), 2, (2, 2, 2, 2)),
    (0, 16, 6, 6, 4, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
    (2, 6, 8, 9, 12, (3, 3), (2, 3), (2, 1), 6, (1, 0, 2, 1)),  # depthwise, multiplier 2
    (2, 12, 5, 7, 24, (1, 1), (1, 1), (1, 1), 3, (0, 0, 0, 0)),  # grouped 1x1, batch 2
    (1, 8, 6, 5, 8, (1, 1), (2, 1), (1, 1), 1, (0, 1, 0, 1)),  # 1x1 strided, padded
    (1, 1, 7, 6, 4, (2, 3), (1, 1), (1, 1), 1, (1, 1, 0, 0)),  # one input channel
    (2, 8, 9, 11, 6, (1, 1), (2, 2), (1, 1), 1, (0, 0, 0, 0)),  # 1x1 stride 2 (resnet50)
    (1, 6, 10, 7, 9, (1, 1), (3, 2), (1, 1), 3, (0, 0, 0, 0)),  # 1x1 strided, grouped
    (1, 8, 9, 8, 4, (1, 1), (1, 2), (1, 1), 1, (0, 0, 0, 0)),  # 1x1 column stride only
    (1, 3, 23, 21, 5, (7, 7), (2, 2), (1, 1), 1, (3, 3, 3, 3)),  # 7x7 s2 (resnet, inception)
    (1, 3, 27, 25, 4, (11, 11), (4, 4), (1, 1), 1, (0, 0, 0, 0)),  # 11x11 s4 (alexnet)
    (1, 3, 15, 17, 5, (3, 3), (2, 2), (1, 1), 1, (0, 0, 0, 0)),  # 3x3 s2 unpadded (squeezenet)
    (1, 10, 9, 9, 8, (5, 5), (1, 1), (1, 1), 2, (2, 2, 2, 2)),  # 5x5 grouped (alexnet)
    (1, 7, 11, 9, 7, (3, 3), (2, 2), (1, 1), 7, (1, 1, 1, 1)),  # depthwise s2, odd
    (1, 5, 6, 7, 5, (2, 2), (1, 1), (1, 1), 5, (1, 0, 0, 1)),  # depthwise, 4 taps
    (1, 5, 6, 7, 10, (1, 2), (1, 1), (1, 2), 5, (0, 1, 0, 1)),  # depthwise, 2 taps, dilated
    (2, 4, 6, 5, 4, (1, 1), (2, 1), (1, 1), 4, (1, 0, 0, 1)),  # depthwise, 1 tap, padded
    (1, 4, 13, 12, 4, (2, 5), (3, 1), (2, 1), 4, (0, 2, 1, 0)),  # depthwise, 10 taps
    (1, 6, 11, 13, 5, (3, 3), (3, 3), (2, 2), 1, (2, 1, 0, 2)),  # stride 3, dilated
    # Float32 outputs 12 or more wide read their taps in place (`conv._taps_gemm`):
    (1, 5, 14, 15, 7, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # rows 15 wide: narrow runs
    (1, 17, 13, 13, 19, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # squeezenet's 13 x 13
    (2, 6, 16, 30, 9, (3, 3), (2, 2), (1, 1), 1, (1, 0, 2, 1)),  # stride 2, batch 2
    (1, 4, 12, 40, 10, (3, 5), (1, 1), (2, 1), 2, (2, 2, 2, 2)),  # grouped, dilated, 40 wide
    (1, 3, 20, 60, 17, (7, 7), (2, 2), (1, 1), 1, (3, 3, 3, 3)),  # 7x7 s2, rows of 30
    (1, 70, 12, 50, 20, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # depth 630: two blocks
    # Depthwise large enough to run in chunks of planes on the pool:
    (1, 64, 30, 30, 64, (3, 3), (1, 1), (1, 1), 64, (1, 1, 1, 1)),
    (2, 24, 28, 28, 48, (3, 3), (2, 2), (1, 1), 24, (1, 1, 1, 1)),  # multiplier 2, stride 2
    # Depthwise 3x3 by output rows (`rvm.kernels.depthwise.by_rows`), odd strides and pads:
    (1, 6, 10, 40, 6, (3, 3), (2, 1), (1, 1), 6, (0, 2, 2, 0)),  # rows 2 apart, 42 columns
    (2, 5, 13, 20, 10, (3, 3), (1, 1), (1, 1), 5, (2, 1, 0, 1)),  # multiplier 2, top pad 2
    (2, 3, 9, 6, 6, (3, 3), (1, 1), (1, 1), 3, (1, 2, 0, 1)),  # rows of 7: one AVX2 vector
    (1, 4, 14, 13, 4, (3, 3), (1, 1), (1, 1), 4, (2, 1, 2, 0)),  # rows of 12: two; 2 pad rows
    (2, 3, 7, 9, 3, (3, 3), (2, 2), (1, 1), 3, (0, 1, 2, 1)),  # stride 2, bottom pad 2
]


def bf16_direct_case(n, c, o, h, w, k, p, d):  # type: ignore[no-untyped-def]
    """A bf16 stride-1 convolution's operands for the turned walk's tests (`test_bf16_tiles`,
    `test_bf16_positions`): ``n`` images of ``c`` x ``h`` x ``w``, an ``o`` x ``c`` x ``k``
    x ``k`` weight (padding ``p``, dilation ``d``), its bias, the output's height and width,
    the image's pair plane (float32 words) and a float32 residual with its pair plane
    (padding 1); seeded by the shape."""
    import numpy as np

    from rvm.kernels import bf16planes
    from rvm.kernels.reference.bf16 import pair_plane

    rng = np.random.default_rng(n + c + o + h + w + k + p + d)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    oh, ow = h + 2 * p - d * (k - 1), w + 2 * p - d * (k - 1)
    wq = bf16planes.pair_width(w, ow, p, k, d, 1)
    plane = np.ascontiguousarray(pair_plane(x, p, p, oh + d * (k - 1) + 1, wq).view(np.float32))
    res = rng.standard_normal((n, o, oh, ow)).astype(np.float32)
    res_plane = np.ascontiguousarray(pair_plane(res, 1, 1, oh + 3, ow + 1).view(np.float32))
    return x, weight, bias, (oh, ow), plane, res, res_plane


def bf16_conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw, bias, act, res, panel=0,
                to=(0, 0, 0, 0), of=(0, 0, 0), before=(0, 0), pairing=0, rof=(0, 0, 0),
                at=(0, 0, 0), orders=0):  # type: ignore[no-untyped-def]  # fmt: skip
    """`rvm.kernels.bf16conv.conv2d` with every argument given, as the entry point gives them
    (`rvm.kernels.bf16entry`): one signature for every test's call, each other one a build
    of its own (about 4 CPU-s)."""
    from rvm.kernels import bf16conv

    bf16conv.conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw, bias, act, res, panel,
                    to, of, before, pairing, rof, at, orders)  # fmt: skip
