"""What torch does with each op the analysis asks about: data only (no torch import).

One row per torch function, tensor method and nn module: its autocast class on the CPU and on
CUDA, whether it has bfloat16/float16 kernels on the CPU, whether its floating inputs must share
one dtype, and what it returns. The CPU column is what `tests/runtime/test_op_table.py` sees
torch do; the CUDA column is the list the op is registered in, in torch's
`ATen/autocast_mode.h` (`AT_FORALL_LOWER_PRECISION_FP`, `AT_FORALL_FP32`,
`AT_FORALL_FP32_SET_OPT_DTYPE`, `AT_FORALL_PROMOTE`), which the same test reads from the
installed torch; `aten` names the registered op an op reaches when it is not itself listed
(`cross_entropy` runs `log_softmax`). docs/ops.md is generated from this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

LOW = frozenset({"bfloat16", "float16"})


class Cast(str, Enum):
    """What autocast does with an op's floating inputs."""

    LOW = "low"  # cast to the autocast dtype: the result is bfloat16/float16
    FLOAT32 = "float32"  # cast to float32
    PROMOTE = "promote"  # cast to the widest input dtype
    NONE = "none"  # left alone: the inputs' dtype (ordinary type promotion, or an error)
    RAISES = "raises"  # refused under autocast (CUDA's binary_cross_entropy)


class Returns(str, Enum):
    """What an op returns, for the precision of its result."""

    TENSOR = "tensor"  # a floating tensor whose dtype the autocast class decides
    VALUES_AND_INDICES = "values and indices"  # `out.max(1)`: `[1]` is an integer tensor
    INTEGER = "integer"  # an integer or bool tensor
    NUMBER = "number"  # Python numbers (`item`, `size`)
    OTHER = "not a tensor"
    MAYBE_INTEGER = "maybe integer"  # a distribution's sample: integer for a categorical
    FLOAT32 = "float32"  # float32 (or float64) whatever the inputs: `.float()`
    LOW = "low"  # bfloat16/float16 whatever the inputs: `.half()`
    NEW = "new"  # a new tensor of its `dtype=` or the default dtype: `torch.zeros`
    LIKE = "like"  # its first argument's dtype, or its `dtype=`: `torch.zeros_like`
    COMPLEX = "complex"  # a complex tensor (complex32 at the lowest: never bfloat16)


class Where(str, Enum):
    """A spelling of an op."""

    TORCH = "torch"
    FUNCTIONAL = "torch.nn.functional"
    LINALG = "torch.linalg"
    METHOD = "Tensor"
    MODULE = "torch.nn"
    MODULE_METHOD = "nn.Module"
    DISTRIBUTION = "torch.distributions.Distribution"


@dataclass(frozen=True)
class Op:
    """One row: `example` is a call on the test's small tensors (`x`, `a`, `v`, ...; `x`,
    `xv`, `xb` and `ximg` are the inputs made low precision when only some are)."""

    name: str
    where: frozenset[Where]
    example: str
    cpu: Cast = Cast.NONE
    cuda: Cast = Cast.NONE
    low_kernels: frozenset[str] = LOW  # the low dtypes it has kernels for on the CPU
    same_dtype: bool = False  # its floating inputs (a module's: and weights) share one dtype
    returns: Returns = Returns.TENSOR
    source: int | None = None  # in place: the argument that must have the receiver's dtype
    # its result tends to ±1 and rounds to it in low precision: `1 - tanh(z)` cancels to 0
    saturates: bool = False
    aten: str | None = None  # the op registered for CUDA autocast, where not `name`


_CODES = {"t": Where.TORCH, "f": Where.FUNCTIONAL, "l": Where.LINALG, "m": Where.METHOD,
          "n": Where.MODULE, "s": Where.MODULE_METHOD, "d": Where.DISTRIBUTION}
_L, _F, _P, _N, _R = Cast.LOW, Cast.FLOAT32, Cast.PROMOTE, Cast.NONE, Cast.RAISES


def _op(name: str, where: str, example: str, cpu: Cast = _N, cuda: Cast = _N, *,
        kernels: tuple[str, ...] = tuple(LOW), same: bool = False,
        returns: Returns = Returns.TENSOR, source: int | None = None,
        aten: str | None = None, saturates: bool = False) -> Op:
    return Op(name, frozenset(_CODES[c] for c in where), example, cpu, cuda, frozenset(kernels),
              same, returns, source, saturates, aten)


_I, _NUM, _OTHER = Returns.INTEGER, Returns.NUMBER, Returns.OTHER
_VI, _NEW, _LIKE = Returns.VALUES_AND_INDICES, Returns.NEW, Returns.LIKE

OPS: tuple[Op, ...] = (
    # matmuls and convolutions: low precision under autocast, one dtype outside it
    _op("matmul", "tm", "torch.matmul(x, a)", _L, _L, same=True),
    _op("mm", "tm", "torch.mm(x, a)", _L, _L, same=True),
    _op("bmm", "tm", "torch.bmm(xb, b)", _L, _L, same=True),
    _op("addmm", "tm", "torch.addmm(a, x, a)", _L, _L, same=True),
    _op("baddbmm", "tm", "torch.baddbmm(b, xb, b)", _L, _L, same=True),
    _op("addbmm", "tm", "torch.addbmm(a, xb, b)", _L, _L, same=True),
    _op("addr", "tm", "torch.addr(a, xv, v)", _N, _L),
    _op("mv", "tm", "torch.mv(x, v)", _N, _L, same=True),
    _op("addmv", "tm", "torch.addmv(v, x, v)", _N, _L, same=True),
    _op("chain_matmul", "t", "torch.chain_matmul(x, a)", _L, _L, same=True),
    _op("einsum", "t", "torch.einsum('ij,jk->ik', x, a)", _L, _L, same=True),
    _op("tensordot", "t", "torch.tensordot(x, a, 1)", _L, _P, same=True),
    _op("linear", "f", "F.linear(x, a)", _L, _L, same=True),
    _op("bilinear", "tf", "F.bilinear(x, a, w3)", _N, _P, same=True),
    _op("conv1d", "tf", "F.conv1d(ximg[:, :, 0], k[..., 0])", _L, _L, same=True),
    _op("conv2d", "tf", "F.conv2d(ximg, k)", _L, _L, same=True),
    _op("conv3d", "tf", "F.conv3d(ximg[..., None], k[..., None])", _L, _L, same=True),
    _op("conv_transpose1d", "tf", "F.conv_transpose1d(ximg[:, :, 0], kt[..., 0])", _L, _L,
        same=True),
    _op("conv_transpose2d", "tf", "F.conv_transpose2d(ximg, kt)", _L, _L, same=True),
    _op("conv_transpose3d", "tf", "F.conv_transpose3d(ximg[..., None], kt[..., None])", _L, _L,
        same=True),
    _op("prelu", "tf", "F.prelu(x, w1)", _L, _L, same=True),
    _op("scaled_dot_product_attention", "f", "F.scaled_dot_product_attention(xb, b, b)", _L, _L,
        same=True),
    _op("embedding", "f", "F.embedding(idx, x)"),
    # one dtype outside autocast, not matmuls
    _op("dot", "tm", "torch.dot(xv, v)", _N, _P, same=True),
    _op("vdot", "tm", "torch.vdot(xv, v)", _N, _P, same=True),
    _op("inner", "tm", "torch.inner(x, a)", _L, _L, same=True, aten="matmul"),
    _op("outer", "tm", "torch.outer(xv, v)"),
    _op("cross", "tm", "torch.cross(x, a, dim=0)", _N, _P, same=True),
    _op("lerp", "tm", "torch.lerp(x, a, a)", same=True),
    _op("grid_sample", "f", "F.grid_sample(ximg, grid, align_corners=False)", _F, _P, same=True,
        aten="grid_sampler"),
    # float32 under CUDA autocast (CPU autocast leaves most of them alone)
    _op("softmax", "tfm", "torch.softmax(x, -1)", _N, _F),
    _op("log_softmax", "tfm", "torch.log_softmax(x, -1)", _N, _F),
    _op("softmin", "f", "F.softmin(x, -1)", _N, _F, aten="softmax"),
    _op("exp", "tm", "torch.exp(x)", _N, _F),
    _op("expm1", "tm", "torch.expm1(x)", _N, _F),
    _op("log", "tm", "torch.log(pos)", _N, _F),
    _op("log10", "tm", "torch.log10(pos)", _N, _F),
    _op("log1p", "tm", "torch.log1p(pos)", _N, _F),
    _op("log2", "tm", "torch.log2(pos)", _N, _F),
    _op("pow", "tm", "torch.pow(x, 2)", _N, _F),
    _op("sum", "tm", "torch.sum(x)", _N, _F),
    _op("prod", "tm", "torch.prod(x)", _F, _F),
    _op("cumsum", "tm", "torch.cumsum(x, 0)", _N, _F),
    _op("cumprod", "tm", "torch.cumprod(x, 0)", _N, _F),
    _op("norm", "tm", "torch.norm(x)", _N, _F),
    _op("normalize", "f", "F.normalize(x)", _N, _F, aten="norm"),
    _op("layer_norm", "f", "F.layer_norm(x, (3,))", _N, _F),
    _op("group_norm", "f", "F.group_norm(ximg, 1)", _N, _F),
    _op("rsqrt", "tm", "torch.rsqrt(pos)", _N, _F),
    _op("reciprocal", "tm", "torch.reciprocal(pos)", _N, _F),
    _op("acos", "tm", "torch.acos(unit)", _N, _F),
    _op("asin", "tm", "torch.asin(unit)", _N, _F),
    _op("cosh", "tm", "torch.cosh(x)", _N, _F),
    _op("sinh", "tm", "torch.sinh(x)", _N, _F),
    _op("tan", "tm", "torch.tan(x)", _N, _F),
    _op("erfinv", "tm", "torch.erfinv(unit)", _N, _F),
    _op("softplus", "f", "F.softplus(x)", _N, _F),
    _op("cosine_similarity", "tf", "F.cosine_similarity(x, a)", _N, _F),
    _op("cdist", "t", "torch.cdist(x, a)", _F, _F, kernels=()),
    _op("pdist", "tf", "F.pdist(x)", _N, _F, kernels=()),
    _op("dist", "tm", "torch.dist(x, a)", _N, _F),
    _op("renorm", "tm", "torch.renorm(x, 2, 0, 1.0)", _N, _F),
    _op("cross_entropy", "f", "F.cross_entropy(x, labels)", _F, _F, aten="nll_loss"),
    _op("nll_loss", "f", "F.nll_loss(x, labels)", _F, _F),
    _op("mse_loss", "f", "F.mse_loss(x, a)", _F, _F),
    _op("l1_loss", "f", "F.l1_loss(x, a)", _F, _F),
    _op("smooth_l1_loss", "f", "F.smooth_l1_loss(x, a)", _F, _F),
    _op("kl_div", "f", "F.kl_div(x, a, reduction='batchmean')", _F, _F),
    _op("binary_cross_entropy_with_logits", "f",
        "F.binary_cross_entropy_with_logits(x, prob)", _F, _F),
    _op("binary_cross_entropy", "f", "F.binary_cross_entropy(xprob, prob)", _F, _R, same=True),
    # no low-precision kernel on the CPU: float32 under CPU autocast
    _op("quantile", "tm", "torch.quantile(xv, 0.5)", _F, _N, kernels=()),
    _op("nanquantile", "tm", "torch.nanquantile(xv, 0.5)", _F, _N, kernels=()),
    _op("svd", "tm", "torch.svd(x)", _F, _N, kernels=()),
    _op("pinverse", "tm", "torch.pinverse(x)", _F, _N, kernels=()),
    _op("inverse", "tm", "torch.inverse(spd)", _F, _N, kernels=()),
    _op("det", "tm", "torch.det(spd)", _N, _N, kernels=()),
    _op("logdet", "tm", "torch.logdet(spd)", _N, _N, kernels=()),
    _op("slogdet", "tm", "torch.slogdet(spd)", _N, _N, kernels=()),
    _op("cholesky", "tm", "torch.cholesky(spd)", _F, _N, kernels=()),
    _op("qr", "tm", "torch.qr(x)", _F, _N, kernels=()),
    _op("lstsq", "l", "torch.linalg.lstsq(spd, a).solution", _F, _N, kernels=()),
    _op("eigh", "l", "torch.linalg.eigh(spd).eigenvalues", _F, _N, kernels=()),
    _op("polar", "t", "torch.polar(pos, x)", _F, _N, kernels=(), returns=Returns.COMPLEX),
    _op("complex", "t", "torch.complex(x, a)", _N, _N, kernels=("float16",),
        returns=Returns.COMPLEX),
    # keep their input's dtype
    _op("matrix_exp", "tm", "torch.matrix_exp(x)"),
    _op("masked_fill", "tm", "torch.masked_fill(x, mask, -1.0)"),
    _op("tril", "tm", "torch.tril(x)"),
    _op("triu", "tm", "torch.triu(x)"),
    _op("transpose", "tm", "torch.transpose(x, 0, 1)"),
    _op("permute", "tm", "torch.permute(x, (1, 0))"),
    _op("reshape", "tm", "torch.reshape(x, (-1,))"),
    _op("flatten", "tm", "torch.flatten(x)"),
    _op("squeeze", "tm", "torch.squeeze(x)"),
    _op("unsqueeze", "tm", "torch.unsqueeze(x, 0)"),
    _op("relu", "tfm", "torch.relu(x)"),
    _op("gelu", "f", "F.gelu(x)"),
    _op("silu", "f", "F.silu(x)"),
    _op("tanh", "tfm", "torch.tanh(x)", saturates=True),
    _op("sigmoid", "tfm", "torch.sigmoid(x)", saturates=True),
    _op("dropout", "tf", "F.dropout(x)"),
    _op("pad", "f", "F.pad(x, (1, 1))"),
    _op("clamp", "tm", "torch.clamp(x, -1.0, 1.0)"),
    _op("clip", "tm", "torch.clip(x, -1.0, 1.0)"),
    _op("abs", "tm", "torch.abs(x)"),
    _op("neg", "tm", "torch.neg(x)"),
    # values and their indices
    _op("max", "tm", "torch.max(x, 1)", returns=_VI),
    _op("min", "tm", "torch.min(x, 1)", returns=_VI),
    _op("topk", "tm", "torch.topk(x, 2)", returns=_VI),
    _op("sort", "tm", "torch.sort(x)", returns=_VI),
    _op("mode", "tm", "torch.mode(x)", returns=_VI),
    _op("median", "tm", "torch.median(x, 1)", returns=_VI),
    _op("kthvalue", "tm", "torch.kthvalue(x, 1)", returns=_VI),
    # integer and bool results
    _op("argmax", "tm", "torch.argmax(x)", returns=_I),
    _op("argmin", "tm", "torch.argmin(x)", returns=_I),
    _op("argsort", "tm", "torch.argsort(x)", returns=_I),
    _op("eq", "tm", "torch.eq(x, a)", returns=_I),
    _op("ne", "tm", "torch.ne(x, a)", returns=_I),
    _op("lt", "tm", "torch.lt(x, a)", returns=_I),
    _op("gt", "tm", "torch.gt(x, a)", returns=_I),
    _op("le", "tm", "torch.le(x, a)", returns=_I),
    _op("ge", "tm", "torch.ge(x, a)", returns=_I),
    _op("nonzero", "tm", "torch.nonzero(x)", returns=_I),
    _op("isnan", "tm", "torch.isnan(x)", returns=_I),
    _op("isinf", "tm", "torch.isinf(x)", returns=_I),
    _op("isfinite", "tm", "torch.isfinite(x)", returns=_I),
    _op("all", "tm", "torch.all(x)", returns=_I),
    _op("any", "tm", "torch.any(x)", returns=_I),
    _op("multinomial", "tm", "torch.multinomial(prob, 1)", returns=_I),
    _op("long", "m", "x.long()", returns=_I),
    _op("int", "m", "x.int()", returns=_I),
    _op("bool", "m", "x.bool()", returns=_I),
    _op("byte", "m", "x.byte()", returns=_I),
    _op("short", "m", "x.short()", returns=_I),
    # casts
    _op("float", "m", "x.float()", returns=Returns.FLOAT32),
    _op("double", "m", "x.double()", returns=Returns.FLOAT32),
    _op("half", "m", "a.half()", returns=Returns.LOW),
    _op("bfloat16", "m", "a.bfloat16()", returns=Returns.LOW),
    # Python numbers and other values
    _op("item", "m", "x[0, 0].item()", returns=_NUM),
    _op("tolist", "m", "x.tolist()", returns=_NUM),
    _op("size", "m", "x.size(0)", returns=_NUM),
    _op("dim", "m", "x.dim()", returns=_NUM),
    _op("numel", "tm", "torch.numel(x)", returns=_NUM),
    _op("element_size", "m", "x.element_size()", returns=_NUM),
    _op("is_tensor", "t", "torch.is_tensor(x)", returns=_NUM),
    _op("numpy", "m", "a.numpy()", kernels=("float16",), returns=_OTHER),
    _op("no_grad", "t", "torch.no_grad()", returns=_OTHER),
    _op("device", "t", "torch.device('cpu')", returns=_OTHER),
    _op("save", "t", "torch.save(x, buffer)", returns=_OTHER),
    _op("manual_seed", "t", "torch.manual_seed(0)", returns=_OTHER),
    _op("state_dict", "s", "layer.state_dict()", returns=_OTHER),
    _op("parameters", "s", "layer.parameters()", returns=_OTHER),
    # new tensors
    _op("tensor", "t", "torch.tensor([1.0, 2.0])", returns=_NEW),
    _op("as_tensor", "t", "torch.as_tensor([1.0, 2.0])", returns=_NEW),
    _op("from_numpy", "t", "torch.from_numpy(array)", returns=_NEW),
    _op("zeros", "t", "torch.zeros(3)", returns=_NEW),
    _op("ones", "t", "torch.ones(3)", returns=_NEW),
    _op("full", "t", "torch.full((3,), 2.0)", returns=_NEW),
    _op("empty", "t", "torch.empty(3)", returns=_NEW),
    _op("rand", "t", "torch.rand(3)", returns=_NEW),
    _op("randn", "t", "torch.randn(3)", returns=_NEW),
    _op("randint", "t", "torch.randint(0, 5, (3,))", returns=_NEW),
    _op("arange", "t", "torch.arange(3)", returns=_NEW),
    _op("linspace", "t", "torch.linspace(0, 1, 3)", returns=_NEW),
    _op("logspace", "t", "torch.logspace(0, 1, 3)", returns=_NEW),
    _op("eye", "t", "torch.eye(3)", returns=_NEW),
    _op("zeros_like", "t", "torch.zeros_like(x)", returns=_LIKE),
    _op("ones_like", "t", "torch.ones_like(x)", returns=_LIKE),
    _op("full_like", "t", "torch.full_like(x, 2.0)", returns=_LIKE),
    _op("empty_like", "t", "torch.empty_like(x)", returns=_LIKE),
    _op("rand_like", "t", "torch.rand_like(x)", returns=_LIKE),
    _op("randn_like", "t", "torch.randn_like(x)", returns=_LIKE),
    # a distribution's samples
    _op("sample", "d", "Categorical(logits=x).sample()", returns=Returns.MAYBE_INTEGER),
    _op("sample_n", "d", "Normal(x, 1.0).sample_n(2)", returns=Returns.MAYBE_INTEGER),
    _op("enumerate_support", "d", "Categorical(logits=x).enumerate_support()",
        returns=Returns.MAYBE_INTEGER),
    # in place: the source takes the receiver's dtype, under autocast or not
    _op("index_add_", "m", "x.index_add_(0, idx, a[:2])", same=True, source=2),
    _op("index_add", "tm", "x.index_add(0, idx, a[:2])", same=True, source=2),
    _op("scatter_add_", "m", "x.scatter_add_(0, cells, a)", same=True, source=2),
    _op("scatter_add", "tm", "x.scatter_add(0, cells, a)", _N, _P, same=True, source=2),
    _op("index_copy_", "m", "x.index_copy_(0, idx, a[:2])", same=True, source=2),
    _op("index_copy", "tm", "x.index_copy(0, idx, a[:2])", _P, same=True, source=2),
    _op("masked_scatter_", "m", "x.masked_scatter_(mask, a)", same=True, source=1),
    _op("masked_scatter", "tm", "x.masked_scatter(mask, a)", same=True, source=1),
    _op("index_put_", "m", "x.index_put_((idx,), a[:2])", same=True, source=1),
    _op("put_", "m", "x.put_(idx, v[:2])", same=True, source=1),
    _op("lerp_", "m", "x.lerp_(a, 0.5)", same=True, source=0),
    # modules (their weights are float32 in an FP32 model)
    _op("Linear", "n", "nn.Linear(3, 3)(x)", _L, _L, same=True, aten="linear"),
    _op("LazyLinear", "n", "nn.LazyLinear(3)(x)", _L, _L, same=True, aten="linear"),
    _op("Bilinear", "n", "nn.Bilinear(3, 3, 2)(x, a)", _N, _P, same=True, aten="bilinear"),
    _op("Conv1d", "n", "nn.Conv1d(2, 3, 3)(ximg[:, :, 0])", _L, _L, same=True, aten="conv1d"),
    _op("Conv2d", "n", "nn.Conv2d(2, 3, 3)(ximg)", _L, _L, same=True, aten="conv2d"),
    _op("Conv3d", "n", "nn.Conv3d(2, 3, 1)(ximg[..., None])", _L, _L, same=True, aten="conv3d"),
    _op("ConvTranspose1d", "n", "nn.ConvTranspose1d(2, 3, 3)(ximg[:, :, 0])", _L, _L, same=True,
        aten="conv_transpose1d"),
    _op("ConvTranspose2d", "n", "nn.ConvTranspose2d(2, 3, 3)(ximg)", _L, _L, same=True,
        aten="conv_transpose2d"),
    _op("ConvTranspose3d", "n", "nn.ConvTranspose3d(2, 3, 1)(ximg[..., None])", _L, _L, same=True,
        aten="conv_transpose3d"),
    _op("LazyConv1d", "n", "nn.LazyConv1d(3, 3)(ximg[:, :, 0])", _L, _L, same=True, aten="conv1d"),
    _op("LazyConv2d", "n", "nn.LazyConv2d(3, 3)(ximg)", _L, _L, same=True, aten="conv2d"),
    _op("LazyConv3d", "n", "nn.LazyConv3d(3, 1)(ximg[..., None])", _L, _L, same=True,
        aten="conv3d"),
    _op("LayerNorm", "n", "nn.LayerNorm(3)(x)", _N, _F, aten="layer_norm"),
    _op("GroupNorm", "n", "nn.GroupNorm(1, 2)(ximg)", _N, _F, aten="group_norm"),
    _op("Softmax", "n", "nn.Softmax(-1)(x)", _N, _F, aten="softmax"),
    _op("LogSoftmax", "n", "nn.LogSoftmax(-1)(x)", _N, _F, aten="log_softmax"),
    _op("Softmin", "n", "nn.Softmin(-1)(x)", _N, _F, aten="softmax"),
    _op("Embedding", "n", "nn.Embedding(3, 2)(idx)", returns=Returns.FLOAT32),
)

# Namespaces whose functions have no low-precision kernels on the CPU (`torch.linalg.eigh`:
# `"linalg_eigh_cpu" not implemented for 'BFloat16'`; `torch.fft.rfft`: `Unsupported dtype`).
FLOAT32_NAMESPACES = ("torch.linalg", "torch.fft")

# torch functions removed for their torch.linalg successors (calling them raises), which have
# no low-precision kernels.
REMOVED_LINALG = frozenset({"eig", "symeig", "solve", "lstsq"})
# Attributes of a tensor that are not tensors (any other attribute of a low-precision value,
# `out.data` or a model output's `outputs.logits`, is low precision too).
NOT_TENSOR_ATTRIBUTES = frozenset({
    "shape", "dtype", "device", "ndim", "is_cuda", "requires_grad", "grad_fn", "layout",
    "names", "is_leaf", "is_sparse", "itemsize", "nbytes",
})

# Libraries whose functions (and the objects they build: a SummaryWriter, a wandb run) turn
# tensor arguments into numpy arrays, which have no bfloat16: `np.asarray(out)`,
# `roc_auc_score(y, probs)`, `plt.plot(pred)`, `writer.add_histogram("out", out)`.
ARRAY_LIBRARIES = (
    "numpy", "scipy", "sklearn", "matplotlib", "pandas", "seaborn", "PIL", "cv2", "imageio",
    "skimage", "wandb", "mlflow", "tensorboardX", "torch.utils.tensorboard", "visdom",
)

# The low-precision dtypes, by qualified name, and the tensor types of those dtypes.
LOW_DTYPES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16", "torch.half": "float16"}
LOW_TENSOR_TYPES = {"torch.HalfTensor": "float16", "torch.cuda.HalfTensor": "float16",
                    "torch.BFloat16Tensor": "bfloat16"}
# Dtypes autocast leaves alone.
OTHER_DTYPES = frozenset({"torch.float32", "torch.float", "torch.float64", "torch.double",
                          "torch.long", "torch.int64", "torch.int32", "torch.int",
                          "torch.bool"})
FLOATING_DTYPES = frozenset({"torch.float32", "torch.float", "torch.float64", "torch.double"})


@dataclass(frozen=True)
class Autocast:
    """A spelling of autocast: `device` where the spelling fixes it, `runtime` for
    amprewrite_runtime's (which picks the device and dtype, and comes with its own scaler)."""

    name: str
    device: str | None = None
    runtime: bool = False


AUTOCAST_SPELLINGS: tuple[Autocast, ...] = (
    Autocast("torch.autocast"),
    Autocast("torch.amp.autocast"),
    Autocast("torch.amp.autocast_mode.autocast"),
    Autocast("torch.cuda.amp.autocast", device="cuda"),
    Autocast("torch.cpu.amp.autocast", device="cpu"),
    Autocast("amprewrite_runtime.autocast", runtime=True),
    Autocast("amprewrite_runtime.autocast.autocast", runtime=True),
)
