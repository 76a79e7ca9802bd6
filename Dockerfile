# The Airflow image of the compose stack: the official image with this provider installed.
# The same image runs every Airflow component, the emulator and the warehouse seeding job.
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}

ARG AIRFLOW_VERSION
ARG PYTHON_VERSION
COPY --chown=airflow:root pyproject.toml README.md /opt/listsync/
COPY --chown=airflow:root deploy/constraints-${PYTHON_VERSION}.txt /opt/listsync/deploy/
COPY --chown=airflow:root src /opt/listsync/src
COPY --chown=airflow:root examples /opt/listsync/examples

# Pinning apache-airflow keeps pip from moving Airflow itself while it resolves the provider's
# dependencies (the way the image's documentation says to add packages); the project's
# constraints hold the rest, celery included, at versions tested together (see the README).
RUN pip install --no-cache-dir "apache-airflow[celery]==${AIRFLOW_VERSION}" "/opt/listsync[postgres]" \
        --constraint "/opt/listsync/deploy/constraints-${PYTHON_VERSION}.txt" \
    && mkdir -p /opt/airflow/listsync
