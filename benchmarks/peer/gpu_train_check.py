"""The peer's hand-rolled check of a GPU image (benchmarks/peer/torch-gpu.Dockerfile): the GPU
is there, and a tiny model trains on it for a few steps with a falling loss. The last line is
its own split in seconds (JSON), so the bench can say where the time went. PEER_ALLOW_CPU=1
lets it run on a machine without a GPU (the bench's dry run)."""

import json
import os
import time

started = time.perf_counter()
import torch  # noqa: E402

imported = time.perf_counter()
if not torch.cuda.is_available() and os.environ.get("PEER_ALLOW_CPU") != "1":
    raise SystemExit("no GPU: torch.cuda.is_available() is False")
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).to(
    device
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(1024, 64, device=device)
y = x.sum(dim=1, keepdim=True)
on_device = time.perf_counter()
losses = []
for _ in range(30):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
trained = time.perf_counter()
if not losses[-1] < losses[0]:
    raise SystemExit(f"loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}")
name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
print(f"ok: torch {torch.__version__} on {name}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
split = {
    "import_s": imported - started,
    "to_device_s": on_device - imported,
    "train_s": trained - on_device,
    "total_s": time.perf_counter() - started,
}
print(json.dumps({k: round(v, 3) for k, v in split.items()}))
