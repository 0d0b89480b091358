"""AWS Bedrock's Converse API: the provider, request building, SigV4 signing, the binary event
stream and its decoding, and Titan/Cohere embeddings.
"""
