"""A toy one-box detector in the torchvision style: model(images, targets) returns a loss dict."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyDetector(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.cls_head = nn.Linear(16, num_classes)
        self.box_head = nn.Linear(16, 4)

    def forward(self, images, targets=None):
        feats = self.backbone(torch.stack(images))
        logits, boxes = self.cls_head(feats), self.box_head(feats).sigmoid()
        if self.training:
            labels = torch.stack([t["labels"] for t in targets])
            gt = torch.stack([t["boxes"] for t in targets])
            return {
                "loss_classifier": F.cross_entropy(logits, labels),
                "loss_box_reg": F.smooth_l1_loss(boxes, gt, beta=1 / 9),
            }
        return [{"boxes": b, "labels": lg.argmax(), "scores": lg.softmax(-1).max()}
                for b, lg in zip(boxes, logits)]


def make_sample(gen):
    label = int(torch.randint(0, 3, (1,), generator=gen))
    img = 0.1 * torch.randn(1, 16, 16, generator=gen)
    x0, y0 = torch.randint(0, 8, (2,), generator=gen).tolist()
    size = 4 + 2 * label
    img[0, y0:y0 + size, x0:x0 + size] += 1.0
    box = torch.tensor([x0, y0, x0 + size, y0 + size], dtype=torch.float32) / 16
    return img, {"boxes": box, "labels": torch.tensor(label)}


def collate_fn(batch):
    return tuple(zip(*batch))


def train_one_epoch(model, optimizer, data_loader, epoch, print_freq=4):
    model.train()
    for i, (images, targets) in enumerate(data_loader):
        loss_dict = model(images, targets)
        losses = sum(loss for loss in loss_dict.values())
        loss_value = losses.item()
        if not math.isfinite(loss_value):
            print(f"Loss is {loss_value}, stopping training")
            print(loss_dict)
            raise SystemExit(1)
        optimizer.zero_grad()
        losses.backward()
        optimizer.step()
        if i % print_freq == 0:
            print(f"epoch {epoch} iter {i} " + " ".join(f"{k}={v.item():.4f}" for k, v in loss_dict.items()))


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataset = [make_sample(gen) for _ in range(192)]
    data_loader = torch.utils.data.DataLoader(dataset, batch_size=16, shuffle=True, collate_fn=collate_fn)
    model = TinyDetector()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-4)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for epoch in range(2):
        train_one_epoch(model, optimizer, data_loader, epoch)
        lr_scheduler.step()
    model.eval()
    with torch.no_grad():
        images, targets = collate_fn(dataset[:32])
        detections = model(list(images))
    acc = sum(int(d["labels"] == t["labels"]) for d, t in zip(detections, targets)) / len(targets)
    print(f"eval accuracy {acc:.2f}")


if __name__ == "__main__":
    main()
