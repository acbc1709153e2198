# Sourced on a lent device machine from the repository root (scripts/gpu-prepare wrote
# .gpu/ here first): installs this project and what .gpu holds, once per machine (a warm
# machine keeps it; a fresh one starts bare). Sets $ICR to the installed `icr-sweep`.
export PYTHONUNBUFFERED=1
if [ ! -f /tmp/.gpu-ready ]; then
  T0=$SECONDS
  SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .gpu/whl/*.whl
  tar xJf .gpu/ray.tar.xz -C "$SP"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
  if ls .gpu/mamba/mamba_ssm-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile .gpu/mamba/mamba_ssm-*.whl
  elif [ -z "${SKIP_MAMBA:-}" ]; then  # no wheel was compiled beforehand: build here (about 3 minutes)
    rm -rf /tmp/mamba-src && mkdir /tmp/mamba-src && tar xzf .gpu/mamba/mamba_ssm-src.tar.gz -C /tmp/mamba-src
    (cd /tmp/mamba-src/mamba_ssm-* && MAMBA_FORCE_BUILD=TRUE MAX_JOBS=16 python3 -m pip install -q --no-index --no-deps --no-build-isolation . > /tmp/mamba-build.log 2>&1) \
      || echo "mamba-ssm build failed: /tmp/mamba-build.log"
  fi
  touch /tmp/.gpu-ready
  echo "device set-up took $((SECONDS - T0)) s"
fi
ICR=$(python3 -c "import sys, os; print(os.path.join(os.path.dirname(sys.executable), 'icr-sweep'))")
