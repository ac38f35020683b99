"""The Liger-Kernel family: its fused linear cross entropy as a hidden-state target."""
