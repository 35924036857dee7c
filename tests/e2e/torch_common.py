"""torch_common.py — what the PyTorch references of the e2e tests (torch_gpt.py,
torch_llama.py) share: their command line, the safetensors reader (over
train_compare.py's), and the AdamW loop that trains torch's model on the
trainer's batches and compares every step's loss and the step-1 gradients with
the trainer's.

The command line starts with INIT DATA RUN.jsonl STEP1_RANK_FILE HEADS SEQ
GLOBAL_BATCH WEIGHT_DECAY BETA1 BETA2 EPS GRAD_CLIP (see torch_gpt.py); a model
may take more numbers after them.  The batches follow runtime/core/data.h:
step k's global batch is windows k*G .. k*G+G-1 (mod the window count), window
j = bytes [j*T, j*T+T]."""
import json, sys
import torch
from train_compare import rel, tensors, worse


class Args:
    """The shared command line, then `extra` more floats (in .extra)."""

    def __init__(self, argv, extra=0):
        if len(argv) < 13 + extra:
            sys.exit("usage: %s: see its docstring" % argv[0])
        self.init, self.data, self.runlog, self.rankfile = argv[1:5]
        self.heads, self.seq, self.batch = (int(v) for v in argv[5:8])
        self.wd, self.b1, self.b2, self.eps, self.clip = (float(v) for v in argv[8:13])
        self.extra = [float(v) for v in argv[13:13 + extra]]


def init_torch():
    """Deterministic and on one thread (the tests share two cores)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)


def read_st(path):
    """The tensors of a safetensors file by name, as fp32 torch tensors."""
    return {k: torch.frombuffer(bytearray(v.tobytes()), dtype=torch.float32).reshape(shape)
            for k, (shape, v) in tensors(path).items()}


def step1_grads(a, P, hf_grad):
    """Compares the step-1 checkpoint's first moments / (1 - beta1) with P's
    gradients; hf_grad(name, g) gives the torch name and layout of our tensor
    `name`'s gradient g.  Returns the number of mismatches."""
    M = read_st(a.rankfile)
    bad, gworst, n = 0, 0.0, 0
    for k, v in M.items():
        kind, name = k.split("/")[:2]
        if kind != "adam_m":
            continue
        n += 1
        hf, g = hf_grad(name, v / (1.0 - a.b1))
        tg = P[hf].grad
        d = ((g - tg).abs().max() / tg.abs().max().clamp_min(1e-30)).item()
        gworst = worse(d, gworst)
        if not (d <= 1e-4):
            print("step-1 gradient of %s: relative difference %.3g" % (hf, d))
            bad += 1
    if n != len(P):
        print("step-1 gradients: %d tensors in the checkpoint, the model has %d" % (n, len(P)))
        bad += 1
    print("step-1 gradients: %d tensors, worst relative difference %.3g" % (n, gworst))
    return bad


def train_compare(a, P, forward, hf_grad, loss_tol):
    """Trains P (forward(tok, tgt) -> loss) with AdamW at the trainer's lr of
    each step (weight decay on the matrices only, clipping at GRAD_CLIP) on the
    trainer's batches; every loss and gradient norm (before clipping) within
    loss_tol relative of the log's, the step-1 gradients within 1e-4
    (step1_grads).  Exits 1 on a mismatch (a NaN is one)."""
    run = [o for o in map(json.loads, open(a.runlog)) if "loss" in o]
    text = open(a.data, "rb").read()
    T, G = a.seq, a.batch
    nwin = (len(text) - 1) // T
    decay = [v for v in P.values() if v.dim() >= 2]
    nodecay = [v for v in P.values() if v.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=1.0, betas=(a.b1, a.b2), eps=a.eps, foreach=True)
    bad = 0
    worst = nworst = 0.0
    for s, o in enumerate(run):
        rows = [(s * G + i) % nwin for i in range(G)]
        buf = torch.tensor([list(text[j * T: j * T + T + 1]) for j in rows], dtype=torch.long)
        loss = forward(buf[:, :T], buf[:, 1:])
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(P.values()), a.clip).item()
        if s == 0:
            bad += step1_grads(a, P, hf_grad)
        for gr in opt.param_groups:
            gr["lr"] = o["lr"]
        opt.step()
        d, dn = rel(o["loss"], loss.item()), rel(o.get("grad_norm"), norm)
        worst, nworst = worse(d, worst), worse(dn, nworst)
        print("step %d: torch %.7f shardc %r (rel %.2g), grad norm torch %.7f shardc %r (rel %.2g)"
              % (o["step"], loss.item(), o["loss"], d, norm, o.get("grad_norm"), dn))
        if not (d <= loss_tol) or not (dn <= loss_tol):
            bad += 1
    print("losses: %d steps, worst relative difference %.3g (grad norm %.3g)" % (len(run), worst, nworst))
    sys.exit(1 if bad else 0)
