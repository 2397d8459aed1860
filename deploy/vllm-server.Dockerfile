# The vLLM server image of deploy/vllm-server.yaml: vLLM's own image with latechunk-dagster's vLLM
# plugins (the span-sum route). The package goes in without its dependencies: the plugins import only
# their own modules, vLLM, torch, numpy and FastAPI, which come with vLLM (tests/test_deploy.py and
# tests/test_plugin_imports.py check that), and Dagster, LanceDB and the rest stay out of the server.
# The image's entry point is vLLM's CLI; deploy/vllm-server.yaml runs `vllm serve`.
#
#   pip wheel --no-deps -w dist .
#   docker build -f deploy/vllm-server.Dockerfile -t registry.example.com/my-team/latechunk-vllm:v0.33.0-0.1.0 .
#
# Pin the vLLM build you tested (the client records the server's vLLM version in every row).
ARG VLLM_IMAGE=vllm/vllm-openai:v0.33.0
FROM ${VLLM_IMAGE}
COPY dist/latechunk_dagster-0.1.0-py3-none-any.whl /tmp/
RUN python3 -m pip install --no-cache-dir --no-deps /tmp/latechunk_dagster-0.1.0-py3-none-any.whl \
    && rm /tmp/latechunk_dagster-0.1.0-py3-none-any.whl
