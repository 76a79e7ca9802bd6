# The Airflow image of the compose stack: the official image with this provider installed.
# The same image runs every Airflow component, the emulator and the warehouse seeding job.
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}

ARG AIRFLOW_VERSION
COPY --chown=airflow:root pyproject.toml README.md /opt/listsync/
COPY --chown=airflow:root src /opt/listsync/src
COPY --chown=airflow:root examples /opt/listsync/examples

# Pinning apache-airflow keeps pip from moving Airflow itself while it resolves the provider's
# dependencies (the way the image's documentation says to add packages).
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" /opt/listsync \
    && mkdir -p /opt/airflow/listsync
