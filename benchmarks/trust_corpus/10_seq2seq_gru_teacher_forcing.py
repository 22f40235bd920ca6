"""Seq2seq with GRU encoder/decoder and teacher forcing: learn to reverse digit strings."""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

SOS_token, EOS_token = 0, 1
VOCAB = 12
MAX_LENGTH = 7
teacher_forcing_ratio = 0.5
random.seed(2)
torch.manual_seed(2)


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size):
        super(EncoderRNN, self).__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)

    def forward(self, input):
        embedded = self.embedding(input)
        output, hidden = self.gru(embedded)
        return output, hidden


class DecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size):
        super(DecoderRNN, self).__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden):
        output = F.relu(self.embedding(input))
        output, hidden = self.gru(output, hidden)
        return self.out(output), hidden


def random_pair(batch):
    length = 5
    src = torch.randint(2, VOCAB, (batch, length))
    tgt = torch.cat([src.flip(1), torch.full((batch, 1), EOS_token)], dim=1)
    return src, tgt


def train(src, tgt, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion):
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    _, encoder_hidden = encoder(src)
    decoder_input = torch.full((src.size(0), 1), SOS_token, dtype=torch.long)
    decoder_hidden = encoder_hidden
    loss = 0
    use_teacher_forcing = random.random() < teacher_forcing_ratio
    for di in range(tgt.size(1)):
        decoder_output, decoder_hidden = decoder(decoder_input, decoder_hidden)
        loss += criterion(decoder_output.squeeze(1), tgt[:, di])
        if use_teacher_forcing:
            decoder_input = tgt[:, di].unsqueeze(1)  # Teacher forcing
        else:
            decoder_input = decoder_output.argmax(-1).detach()
    loss.backward()
    encoder_optimizer.step()
    decoder_optimizer.step()
    return loss.item() / tgt.size(1)


hidden_size = 64
encoder = EncoderRNN(VOCAB, hidden_size)
decoder = DecoderRNN(hidden_size, VOCAB)
encoder_optimizer = optim.Adam(encoder.parameters(), lr=0.01)
decoder_optimizer = optim.Adam(decoder.parameters(), lr=0.01)
criterion = nn.CrossEntropyLoss()

print_loss_total = 0
for iter in range(1, 21):
    src, tgt = random_pair(32)
    loss = train(src, tgt, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion)
    print_loss_total += loss
    if iter % 5 == 0:
        print("iter %d avg loss %.4f" % (iter, print_loss_total / 5))
        print_loss_total = 0
