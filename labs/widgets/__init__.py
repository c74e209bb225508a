"""Live Jupyter controls (ipywidgets), one module per chapter. They need a kernel; the static
site shows the plotly frames/slider version of the same picture instead."""
