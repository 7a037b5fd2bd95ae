"""What every stage and every framework shares: atomic outputs, parallel maps, errors."""
