"""Knowledge distillation: a frozen teacher (under no_grad), KL divergence at temperature T."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def distillation_loss(student_logits, teacher_logits, labels, T=4.0, alpha=0.7):
    soft = F.kl_div(F.log_softmax(student_logits / T, dim=1), F.softmax(teacher_logits / T, dim=1),
                    reduction="batchmean") * (T * T)
    hard = F.cross_entropy(student_logits, labels)
    return alpha * soft + (1 - alpha) * hard


def main():
    torch.manual_seed(0)
    W = torch.randn(24, 6)
    X = torch.randn(2048, 24)
    Y = (X @ W).argmax(1)
    teacher = nn.Sequential(nn.Linear(24, 128), nn.ReLU(), nn.Linear(128, 6))
    t_opt = torch.optim.Adam(teacher.parameters(), lr=1e-2)
    for i in range(0, 2048, 128):  # quick teacher pre-training
        t_loss = F.cross_entropy(teacher(X[i:i + 128]), Y[i:i + 128])
        t_opt.zero_grad()
        t_loss.backward()
        t_opt.step()
    teacher.eval()

    student = nn.Sequential(nn.Linear(24, 16), nn.ReLU(), nn.Linear(16, 6))
    optimizer = torch.optim.Adam(student.parameters(), lr=1e-2)
    for step, i in enumerate(range(0, 2048, 128)):
        x, y = X[i:i + 128], Y[i:i + 128]
        with torch.no_grad():
            teacher_logits = teacher(x)
        student_logits = student(x)
        loss = distillation_loss(student_logits, teacher_logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 4 == 0:
            print(f"step {step}: kd loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
