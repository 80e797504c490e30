#!/bin/bash
# The beyond study's 15 fits, seed-major (all 5 configurations of a seed before the next seed).
cd /work/wt-beyond
export PYTHONPATH=/work/wt-beyond
P=/work/main/.venv/bin/python
S="nice -n 5 $P -m ssl_app.sweep --config configs/cifar10/small_study.yaml --out /tmp/beyond/sweeps --name beyond"
X="--data=/tmp/beyond/cifar10_folder.yaml --trainer.max_epochs=4"
L=model.init_args.loss
B=configs/losses/beyond_softmax
for seed in 0 1 2; do
  echo "=== seed $seed start $(date -u +%T)"
  $S --seeds $seed --grid $L.init_args.temperature=0.2,0.5 -- $X
  $S --seeds $seed --config $B/dcl.yaml --grid $L=ssl_app.losses.DCL -- $X
  $S --seeds $seed --config $B/spectral.yaml --grid $L=ssl_app.losses.Spectral -- $X
  $S --seeds $seed --config $B/sigmoid.yaml --grid $L=ssl_app.losses.Sigmoid -- $X
  echo "=== seed $seed end $(date -u +%T)"
done
echo "=== all done $(date -u +%T)"
