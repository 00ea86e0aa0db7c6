<?php
$author = $_GET['author'];
$posts = $wpdb->get_results("SELECT * FROM {$wpdb->posts} WHERE post_author = $author"); // want: sql-injection
$safe = $wpdb->get_results($wpdb->prepare("SELECT * FROM {$wpdb->posts} WHERE post_author = %d", $author));
