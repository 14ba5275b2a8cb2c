"""The admission webhook server (see docs/webhook.md): a wing of its own over `admission`."""
