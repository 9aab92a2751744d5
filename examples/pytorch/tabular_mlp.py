"""A torch MLP on the sealed breast-cancer sample through the enclave package.

Development mode (keys from the local tenant keystore; examples/pytorch/README.md):

    PYTHONPATH=build/release/python /usr/bin/python3 examples/pytorch/tabular_mlp.py \\
      --job examples/breast_cancer_sealed.toml --keystore out/tenant.keystore

The records are decrypted into locked memory by the package, never by this script; the
trained state_dict leaves only sealed to the tenant's export key (the job's export_key).
"""

import argparse
import io

import torch

import enclave


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", required=True)
    p.add_argument("--keystore", required=True)
    p.add_argument("--passphrase-fd", type=int, default=-1, help="default: prompt on the terminal")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--out", default="out/pytorch-breast-cancer-mlp.sealed")
    args = p.parse_args()

    session = enclave.Session.development(args.job, args.keystore, args.passphrase_fd)
    data = enclave.SealedTensorDataset(session)
    train, val = data.stratified_split(0.2, seed=7)  # the split enclave-train makes
    xt, _ = (torch.from_dlpack(t) for t in data.gather(train))
    mean, std = xt.mean(0), xt.std(0, unbiased=False).clamp_min(1e-12)  # training rows only

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(data.features, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, data.classes))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    for epoch in range(args.epochs):
        for x, y in enclave.torch_batches(data, 32, shuffle=True, seed=epoch, rows=train):
            loss = torch.nn.functional.cross_entropy(model((x - mean) / std), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    xv, yv = (torch.from_dlpack(t) for t in data.gather(val))
    with torch.no_grad():
        accuracy = float((model((xv - mean) / std).argmax(1) == yv).float().mean())
    print(f"validation accuracy {accuracy:.4f} ({len(val)} rows, {args.epochs} epochs)")

    # The model and the scaling it needs, sealed to the tenant (enclave-data open-model).
    buf = io.BytesIO()
    torch.save({"state_dict": model.state_dict(), "mean": mean, "std": std}, buf)
    digest = session.export(buf.getvalue(), args.out, format="pytorch", overwrite=True)
    print(f"exported {args.out} (sha256 {digest})")
    session.close()  # wipes every buffer the package handed out


if __name__ == "__main__":
    main()
