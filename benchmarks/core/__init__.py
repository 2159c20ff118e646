"""What every layer uses: exit codes and one-line errors, the signal and process policy, files written whole,
"module:Class" plugin loading, and each framework's facts known without importing it."""
