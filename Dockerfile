# kfed's image: `python -m manager` on the manager cluster, `python -m worker_agent` on workers.
# Build: docker build -t ghcr.io/kfed/kfed:0.1.0 .

# --- build: a virtual environment with kfed and its dependencies ------------------------------
FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/kfed
COPY pyproject.toml README.md ./
COPY manager ./manager
COPY worker_agent ./worker_agent
RUN /opt/kfed/bin/pip install .

# --- run: the slim base, the environment, no compilers, a non-root user -----------------------
FROM python:3.11-slim-bookworm
ENV PATH=/opt/kfed/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /opt/kfed /opt/kfed
# The distroless "nonroot" id; the Deployments run with a read-only root filesystem and /tmp as an emptyDir.
USER 65532:65532
EXPOSE 8080 8081 9443
ENTRYPOINT ["python"]
CMD ["-m", "manager"]
