#!/bin/bash
# Validate each finished run's last checkpoint with the geometry metrics (−W₂, LiDAR q=10 on 1,000 images),
# using main 6af8712 + geometry41 merged in /tmp/beyond/geo_repo, as the runs finish (seed-major, like the sweep).
cd /tmp/beyond/geo_repo
export PYTHONPATH=/tmp/beyond/geo_repo
P=/work/main/.venv/bin/python
ROOT=/tmp/beyond/sweeps/beyond
for seed in 0 1 2; do
  for point in temperature=0.2 temperature=0.5 loss=DCL loss=Spectral loss=Sigmoid; do
    R=$ROOT/$point/seed$seed
    until [ -f $R/run.json ] && [ "$($P -c "import json;print(json.load(open('$R/run.json'))['status'])")" = done ]; do sleep 20; done
    if ls $R/evaluations/validate_*/run.json >/dev/null 2>&1 && grep -q '"status": "done"' $R/evaluations/validate_*/run.json; then
      echo "skip $point seed$seed (validated)"; continue
    fi
    echo "=== validate $point seed$seed start $(date -u +%T)"
    nice -n 5 $P -m ssl_app validate --config $R/config.yaml --ckpt_path $R/checkpoints/last.ckpt \
      --trainer.callbacks=configs/callbacks/metrics_lidar.yaml > $R/validate.log 2>&1
    echo "=== validate $point seed$seed rc=$? end $(date -u +%T)"
  done
done
echo "=== all validated $(date -u +%T)"
