"""Run the mylm CLI as `python -m mylm`."""

from .cli import main

if __name__ == "__main__":
    main()
