print("FuzzRunner stand-in")
