"""The central inference service: ZeroMQ server, wire protocol, client, and
the network definitions shared by trainer, batcher and the local evaluator."""
