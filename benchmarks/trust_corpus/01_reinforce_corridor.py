"""REINFORCE on a tiny corridor walk (after pytorch/examples reinforcement_learning)."""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

parser = argparse.ArgumentParser(description="PyTorch REINFORCE example")
parser.add_argument("--gamma", type=float, default=0.9, metavar="G")
parser.add_argument("--seed", type=int, default=543, metavar="N")
parser.add_argument("--episodes", type=int, default=20)
parser.add_argument("--log-interval", type=int, default=5)
args = parser.parse_args()


class Corridor:
    """Walk right along 6 cells; +1 per step right, episode ends at the goal or after 8 steps."""

    def __init__(self, length=6, horizon=8):
        self.length, self.horizon = length, horizon

    def reset(self):
        self.pos, self.t = 0, 0
        return self._obs()

    def _obs(self):
        obs = np.zeros(self.length, dtype=np.float32)
        obs[self.pos] = 1.0
        return obs

    def step(self, action):
        self.t += 1
        reward = 1.0 if action == 1 else 0.0
        self.pos = min(self.pos + action, self.length - 1)
        done = self.pos == self.length - 1 or self.t >= self.horizon
        return self._obs(), reward, done


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(6, 32)
        self.affine2 = nn.Linear(32, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = F.relu(self.affine1(x))
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


env = Corridor()
torch.manual_seed(args.seed)
np.random.seed(args.seed)
policy = Policy()
optimizer = optim.Adam(policy.parameters(), lr=1e-2)


def select_action(state):
    state = torch.from_numpy(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    R = 0
    policy_loss = []
    returns = []
    for r in policy.rewards[::-1]:
        R = r + args.gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]
    return policy_loss.item()


def main():
    running_reward = 0
    for i_episode in range(1, args.episodes + 1):
        state, ep_reward = env.reset(), 0
        for t in range(1, 10):
            action = select_action(state)
            state, reward, done = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        loss = finish_episode()
        if i_episode % args.log_interval == 0:
            print(f"Episode {i_episode}\tLast reward: {ep_reward:.2f}\tloss {loss:.3f}"
                  f"\tAverage reward: {running_reward:.2f}")


if __name__ == "__main__":
    main()
