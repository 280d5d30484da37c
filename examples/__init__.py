"""Example model files (``build_net(graph, device, mode) -> ModelSpec``)."""
