# Word-level LSTM language model (pytorch/examples word_language_model habits): truncated BPTT,
# repackaged hidden state, manual SGD with clipping, perplexity.
import argparse
import math

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description="PyTorch LSTM Language Model")
parser.add_argument("--emsize", type=int, default=32)
parser.add_argument("--nhid", type=int, default=64)
parser.add_argument("--lr", type=float, default=5.0)
parser.add_argument("--clip", type=float, default=0.25)
parser.add_argument("--bptt", type=int, default=10)
parser.add_argument("--batch_size", type=int, default=8)
parser.add_argument("--seed", type=int, default=1111)
args = parser.parse_args()
torch.manual_seed(args.seed)

# a synthetic corpus with a repeating grammar over 20 word ids
ntokens = 20
pattern = torch.tensor([0, 3, 5, 7, 2, 9, 11, 3, 14, 1, 6, 18])
corpus = pattern.repeat(60)
corpus = torch.where(torch.rand(len(corpus)) < 0.05, torch.randint(0, ntokens, corpus.shape), corpus)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


train_data = batchify(corpus, args.batch_size)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers=1, dropout=0.2):
        super(RNNModel, self).__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=0.0)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)


model = RNNModel(ntokens, args.emsize, args.nhid)
criterion = nn.NLLLoss()
lr = args.lr


def train():
    model.train()
    total_loss = 0.0
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
    return total_loss / (batch + 1)


for epoch in range(1, 3):
    train_loss = train()
    print("| epoch {:3d} | loss {:5.2f} | ppl {:8.2f}".format(epoch, train_loss, math.exp(train_loss)))
