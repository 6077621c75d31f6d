# changed: a new config (nanoGPT's own configurator), for benchmarks/bench_goodput.py: a tiny GPT on 2 CPU ranks (gloo),
# the synthetic dataset of data/synthetic/prepare.py, a checkpoint every eval_interval iterations, resumed on a restart.
out_dir = 'out'
init_from = 'resume' # train.py starts from scratch while out_dir has no ckpt.pt
eval_interval = 20
eval_iters = 2
log_interval = 1
always_save_checkpoint = True

dataset = 'synthetic'
gradient_accumulation_steps = 2 # 1 per rank on 2 ranks
batch_size = 8
block_size = 64

n_layer = 2
n_head = 2
n_embd = 64
dropout = 0.0

learning_rate = 1e-3
max_iters = 200
lr_decay_iters = 200
min_lr = 1e-4
warmup_iters = 10

device = 'cpu'
backend = 'gloo'
dtype = 'float32'
compile = False # torch.compile costs minutes on 2 CPU cores
