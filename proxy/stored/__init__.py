"""What the gateway stores of the API's objects: the Responses API's stored responses (in memory
or in the database) and the conversation state a ``previous_response_id`` continues.
"""
