"""DQN with a replay buffer and a target network on a small chain MDP."""
import random
from collections import deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

Transition = namedtuple("Transition", ("state", "action", "next_state", "reward", "done"))

BATCH_SIZE = 32
GAMMA = 0.5
EPS = 0.3
TARGET_UPDATE = 5
NUM_STEPS = 24
random.seed(0)
np.random.seed(0)
torch.manual_seed(0)


class ReplayMemory(object):
    def __init__(self, capacity):
        self.memory = deque([], maxlen=capacity)

    def push(self, *args):
        self.memory.append(Transition(*args))

    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)

    def __len__(self):
        return len(self.memory)


class Chain:
    """States 0..4 as one-hot; action 1 moves right (+1 at the end), action 0 resets (+0.1)."""

    n = 5

    def reset(self):
        self.s = 0
        return self.s

    def step(self, a):
        if a == 1:
            self.s += 1
            if self.s == self.n - 1:
                return self.s, 1.0, True
            return self.s, 0.0, False
        self.s = 0
        return self.s, 0.1, False


def one_hot(s):
    v = torch.zeros(Chain.n)
    v[s] = 1.0
    return v


class DQN(nn.Module):
    def __init__(self, n_states, n_actions):
        super(DQN, self).__init__()
        self.layer1 = nn.Linear(n_states, 64)
        self.layer2 = nn.Linear(64, 64)
        self.layer3 = nn.Linear(64, n_actions)

    def forward(self, x):
        x = F.relu(self.layer1(x))
        x = F.relu(self.layer2(x))
        return self.layer3(x)


policy_net = DQN(Chain.n, 2)
target_net = DQN(Chain.n, 2)
target_net.load_state_dict(policy_net.state_dict())
optimizer = optim.AdamW(policy_net.parameters(), lr=3e-3, amsgrad=True)
memory = ReplayMemory(1000)
env = Chain()


def select_action(state):
    if random.random() > EPS:
        with torch.no_grad():
            return policy_net(one_hot(state).unsqueeze(0)).max(1).indices.item()
    return random.randrange(2)


# fill the buffer with random experience first
state = env.reset()
for _ in range(200):
    action = random.randrange(2)
    nxt, reward, done = env.step(action)
    memory.push(one_hot(state), action, one_hot(nxt), reward, done)
    state = env.reset() if done else nxt


def optimize_model():
    transitions = memory.sample(BATCH_SIZE)
    batch = Transition(*zip(*transitions))
    state_batch = torch.stack(batch.state)
    action_batch = torch.tensor(batch.action).unsqueeze(1)
    reward_batch = torch.tensor(batch.reward)
    next_batch = torch.stack(batch.next_state)
    not_done = 1.0 - torch.tensor(batch.done, dtype=torch.float32)

    state_action_values = policy_net(state_batch).gather(1, action_batch)
    with torch.no_grad():
        next_state_values = target_net(next_batch).max(1).values * not_done
    expected = reward_batch + GAMMA * next_state_values
    criterion = nn.SmoothL1Loss()
    loss = criterion(state_action_values, expected.unsqueeze(1))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
    optimizer.step()
    return loss.item()


losses = []
state = env.reset()
for step in range(NUM_STEPS):
    action = select_action(state)
    nxt, reward, done = env.step(action)
    memory.push(one_hot(state), action, one_hot(nxt), reward, done)
    state = env.reset() if done else nxt
    losses.append(optimize_model())
    if step % TARGET_UPDATE == 0:
        target_net.load_state_dict(policy_net.state_dict())
print("td loss first/last:", np.round(losses[0], 4), np.round(np.mean(losses[-5:]), 4))
