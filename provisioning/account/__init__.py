"""Whether an AWS account (or the sandbox) is ready for deepvm, as `deepvm check` shows it: who the
credentials are (`check`), each right `plan`, `up` and managed jobs need (`access`), the plan and the quotas
or room it needs (`limits`), the image (`image`), all as typed rows (`report`)."""
