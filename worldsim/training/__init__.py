"""Policy training: behaviour cloning, PPO and GRPO, in physics or in imagination."""
