"""A small 1-D convolutional network on `enclave-data synth` data, streamed.

`enclave-data synth` writes numeric columns f0..fN-1 (about standard normal) and a binary
label y from a fixed random linear rule plus noise: no spatial structure, so the
convolution is here to show the package feeding a conv model (records as [n, 1, N]
signals), not because it suits the data. The training set is streamed with
enclave.SealedIterableDataset (a window of chunks decrypted at a time); the test set is a
second sealed dataset of the job. Development mode (examples/pytorch/README.md):

    PYTHONPATH=build/release/python /usr/bin/python3 examples/pytorch/synth_conv.py \\
      --job examples/pytorch/synth.toml --keystore out/tenant.keystore
"""

import argparse
import io

import torch

import enclave


class Conv(torch.nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.conv = torch.nn.Sequential(torch.nn.Conv1d(1, 8, 5, padding=2), torch.nn.ReLU(),
                                        torch.nn.Conv1d(8, 8, 5, padding=2), torch.nn.ReLU())
        self.head = torch.nn.Linear(8 * features, classes)

    def forward(self, x):
        return self.head(self.conv(x.unsqueeze(1)).flatten(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", required=True)
    p.add_argument("--keystore", required=True)
    p.add_argument("--passphrase-fd", type=int, default=-1, help="default: prompt on the terminal")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--out", default="out/pytorch-synth-conv.sealed")
    args = p.parse_args()

    session = enclave.Session.development(args.job, args.keystore, args.passphrase_fd)
    train = enclave.SealedIterableDataset(session, batch_size=64, window_chunks=4, shuffle=True, seed=1,
                                          dataset="synth-train")
    test = enclave.SealedIterableDataset(session, batch_size=256, dataset="synth-test")

    torch.manual_seed(0)
    model = Conv(train.features, train.classes)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(args.epochs):
        train.set_epoch(epoch)
        for x, y in torch.utils.data.DataLoader(train, batch_size=None):  # the dataset batches
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    right = total = 0
    with torch.no_grad():
        for x, y in test:
            right += int((model(x).argmax(1) == y).sum())
            total += len(y)
    print(f"test accuracy {right / total:.4f} ({total} rows, {args.epochs} epochs, "
          f"{train.rows} training rows streamed {train.window_rows} at a time)")

    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    digest = session.export(buf.getvalue(), args.out, format="pytorch", overwrite=True)
    print(f"exported {args.out} (sha256 {digest})")
    session.close()


if __name__ == "__main__":
    main()
