"""Conditional GAN (label embedding concatenated to noise), least-squares loss."""
import numpy as np
import torch
import torch.nn as nn

N_CLASSES, LATENT, DIM = 4, 8, 6
torch.manual_seed(11)
np.random.seed(11)
CENTERS = torch.randn(N_CLASSES, DIM) * 2


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.label_emb = nn.Embedding(N_CLASSES, N_CLASSES)
        self.model = nn.Sequential(
            nn.Linear(LATENT + N_CLASSES, 64), nn.BatchNorm1d(64, 0.8), nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, DIM),
        )

    def forward(self, noise, labels):
        gen_input = torch.cat((self.label_emb(labels), noise), -1)
        return self.model(gen_input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.label_embedding = nn.Embedding(N_CLASSES, N_CLASSES)
        self.model = nn.Sequential(
            nn.Linear(N_CLASSES + DIM, 64), nn.LeakyReLU(0.2, inplace=True), nn.Dropout(0.1),
            nn.Linear(64, 1),
        )

    def forward(self, img, labels):
        d_in = torch.cat((img, self.label_embedding(labels)), -1)
        return self.model(d_in)


adversarial_loss = torch.nn.MSELoss()
generator = Generator()
discriminator = Discriminator()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-3, betas=(0.5, 0.999))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-3, betas=(0.5, 0.999))


def train_step(batch_size=64):
    labels = torch.randint(0, N_CLASSES, (batch_size,))
    real_imgs = CENTERS[labels] + 0.1 * torch.randn(batch_size, DIM)
    valid = torch.ones(batch_size, 1)
    fake = torch.zeros(batch_size, 1)

    optimizer_G.zero_grad()
    z = torch.randn(batch_size, LATENT)
    gen_labels = torch.randint(0, N_CLASSES, (batch_size,))
    gen_imgs = generator(z, gen_labels)
    validity = discriminator(gen_imgs, gen_labels)
    g_loss = adversarial_loss(validity, valid)
    g_loss.backward()
    optimizer_G.step()

    optimizer_D.zero_grad()
    validity_real = discriminator(real_imgs, labels)
    d_real_loss = adversarial_loss(validity_real, valid)
    validity_fake = discriminator(gen_imgs.detach(), gen_labels)
    d_fake_loss = adversarial_loss(validity_fake, fake)
    d_loss = (d_real_loss + d_fake_loss) / 2
    d_loss.backward()
    optimizer_D.step()
    return d_loss.item(), g_loss.item(), gen_imgs, gen_labels


for step in range(15):
    d, g, gen_imgs, gen_labels = train_step()
    if step % 5 == 0:
        print(f"step {step}: D {d:.4f} G {g:.4f}")

# per-class distance to the class centre, with numpy
samples = gen_imgs.detach().numpy()
dist = np.linalg.norm(samples - CENTERS[gen_labels].numpy(), axis=1)
print("mean distance to class centre:", dist.mean().round(3))
