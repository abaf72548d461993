"""Images, a room both local_docker and kubernetes use: ``client.py`` connects to the Docker
engine and says its errors in one line, ``workspace.py`` builds a workspace onto a base image
(by content, cached), ``registry.py`` pushes an image and names it by digest, and
``progress.py`` says what a build and a push are doing. No backend's module is imported here.
"""
