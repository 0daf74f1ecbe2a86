# Sourced by .ci/run and .ci/other-pythons: the free disk of the checkout's filesystem, said with a label.
disk() { echo "disk: $(df -Ph . | awk 'NR==2 {print $4 " free of " $2}') ($1)"; }
