"""ladle from a PyG user's own code: their Data, their model, their tracker.

    python -m ladle.examples.pyg_api --root ../shared/data/planetoid      # Cora's raw files under ROOT/Cora/raw

Four GraphSAGE ingredients (PyG's own model class) train independently on neighbour-sampled batches, then
ladle soups them and reports every soup against the best ingredient and the ensemble.
"""
import argparse

import torch
from torch_geometric.data import Data
from torch_geometric.nn.models import GraphSAGE

import ladle


class PrintBest(ladle.Callback):
    """A callback: called in this process for every model's epochs, whichever engine trains them."""

    def on_ingredient_end(self, ingredient, summary):
        print(f"{ingredient}: val {summary['val']:.3f}")


def sage(in_channels, out_channels):  # any (in, out) -> nn.Module whose forward(x, edge_index) gives logits
    return GraphSAGE(in_channels, 64, num_layers=2, out_channels=out_channels, dropout=0.5)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default="data")
    parser.add_argument("--out", default="runs/pyg-api")
    parser.add_argument("--epochs", type=int, default=100)
    args = parser.parse_args()

    cora = ladle.load_graph("Cora", args.root).data  # a torch_geometric.data.Data; bring your own instead
    data = Data(x=cora.x, edge_index=cora.edge_index, y=cora.y,
                train_mask=cora.train_mask, val_mask=cora.val_mask, test_mask=cora.test_mask)
    config = {"ingredients": 4, "seed": 0,
              "sampler": {"name": "neighbor", "fanouts": [10, 5], "batch_size": 64},
              "train": {"epochs": args.epochs, "patience": 20},
              "soups": ["uniform", "greedy", "gis", "ensemble"]}
    results = ladle.run(config, args.out, graph=data, model=sage, callbacks=[PrintBest()], save_graph=True)

    print(f"best ingredient test {results['best_ingredient']['test']:.3f}")
    for name, soup in results["soups"].items():
        print(f"{name:9s} test {soup['test']:.3f}")
    model = ladle.load_model(args.out, "gis", model=sage)  # the soup, as the PyG module it is
    with torch.no_grad():
        prediction = model(data.x, data.edge_index).argmax(-1)
    print("GIS soup predicts", prediction[:10].tolist(), "...")


if __name__ == "__main__":
    main()
