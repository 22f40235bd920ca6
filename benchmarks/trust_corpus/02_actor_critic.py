# Advantage actor-critic on a two-armed contextual bandit, one shared trunk, two heads.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

GAMMA = 0.95
LR = 3e-3
EPISODES = 20
SEED = 7

torch.manual_seed(SEED)
rng = np.random.RandomState(SEED)


class ContextEnv:
    """Observation is a noisy one-hot of the good arm; 4 steps per episode."""

    def reset(self):
        self.t = 0
        return self._observe()

    def _observe(self):
        self.good = rng.randint(4)
        obs = rng.normal(0, 0.1, size=8).astype(np.float32)
        obs[self.good] += 1.0
        return obs

    def step(self, action):
        self.t += 1
        reward = 1.0 if action == self.good else -0.1
        return self._observe(), reward, self.t >= 4


class ActorCritic(nn.Module):
    def __init__(self, n_obs=8, n_act=4, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_obs, hidden), nn.Tanh())
        self.action_head = nn.Linear(hidden, n_act)
        self.value_head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.body(x)
        return F.softmax(self.action_head(h), dim=-1), self.value_head(h)


model = ActorCritic()
optimizer = torch.optim.Adam(model.parameters(), lr=LR)
env = ContextEnv()
history = []

for episode in range(EPISODES):
    obs = env.reset()
    log_probs, values, rewards = [], [], []
    done = False
    while not done:
        probs, value = model(torch.from_numpy(obs).unsqueeze(0))
        dist = Categorical(probs)
        action = dist.sample()
        obs, reward, done = env.step(action.item())
        log_probs.append(dist.log_prob(action))
        values.append(value.squeeze())
        rewards.append(reward)

    returns, R = [], 0.0
    for r in reversed(rewards):
        R = r + GAMMA * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    values = torch.stack(values)
    advantage = returns - values.detach()
    actor_loss = -(torch.cat(log_probs) * advantage).mean()
    critic_loss = F.smooth_l1_loss(values, returns)
    loss = actor_loss + 0.5 * critic_loss

    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    history.append(sum(rewards))
    if episode % 5 == 4:
        print(f"episode {episode + 1}: mean return {np.mean(history[-5:]):.2f} loss {loss.item():.4f}")
